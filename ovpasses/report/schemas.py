"""The schema id of every JSON report, in one place. A report that changes shape gets a new id; the
mapping from each old id is in docs/architecture.md ("JSON schemas")."""

# ovpass rewrite --format json: RewriteSummary.to_dict(). /2: actions are enum values (plan.decisions.Action),
# a step left out by --passes is in "not_applied", unreadable operations carry "action" and "reason" apart
REWRITE = "ovpass.rewrite/2"
# ovpass rewrite DIR --format json: per IR its rewrite report
REWRITE_FOLDER = "ovpass.rewrite-folder/2"
# ovpass inspect --format json: per SDPA its action (an enum value), reason and fusion verdict. /3: the
# fusion verdict's outcome is an enum value (analysis.stateful_fusion.Fusion), its reason without the verdict
INSPECT = "ovpass.inspect/3"
# ovpass inspect DIR --format json: a list of INSPECT reports
INSPECT_FOLDER = "ovpass.inspect-folder/3"
# ovpass check DIR --format json: per IR its check report (no plan decisions in it: unchanged)
CHECK_FOLDER = "ovpass.check-folder/1"
# any command with --format json that fails: {"schema", "error": {"code", "message"}} on stdout, the message
# also on stderr; "code" is an ovpasses.errors.ErrorCode value, "message" the one line of stderr
ERROR = "ovpass.error/1"
