"""``ovpass``'s arguments: the parser of every command, its option types and the exit codes its help states; the
one-line error (and its JSON object) that argparse's own errors follow. :mod:`ovpasses.app.cli` runs the commands.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import openvino as ov

import ovpasses
from ovpasses import precision
from ovpasses.app import check, folder
from ovpasses.errors import ErrorCode, OvpassesError
from ovpasses.options import MODES, RewriteOptions
from ovpasses.plan import runtimes
from ovpasses.report import schemas

EXIT_OK = 0
EXIT_WORSE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INCONCLUSIVE = 4

class _State:
    """Whether this run's errors are also a JSON object on stdout (--format json); set by ``main()`` from its argv,
    so that argparse's errors, raised before the arguments are parsed, follow it too."""

    json_errors = False


STATE = _State()


def wants_json(argv: list[str]) -> bool:
    return any(a == "--format=json" or a == "--format" and b == "json" for a, b in zip(argv, argv[1:] + [""]))


def print_json_error(code: ErrorCode, line: str) -> None:
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps({"schema": schemas.ERROR, "error": {"code": ErrorCode(code).value, "message": line}},
                         indent=2), flush=True)


EPILOG = """\
exit codes:
  0  success (check: OK, both run and agree, or FIXED, the rewritten model runs or gives numbers
     where the original does not)
  1  check: WORSE, the rewritten model fails or gives NaN where the original does not, or their
     outputs differ beyond the tolerance
  2  usage or input error (bad arguments, a missing or damaged IR, a refused output path, a device
     OpenVINO does not see); nothing is written
  3  unexpected internal failure (rerun with --debug for the traceback and report it)
  4  check: INCONCLUSIVE, nothing could be compared (neither model ran a step on the inputs made,
     both fail, or no output value is finite in both), or the outputs differ at a precision that
     cannot decide (--precision default on a bf16 CPU)

Run 'ovpass COMMAND --help' for the options of a command.
"""

RUNTIME_HELP = ("the OpenVINO release to prepare the IR for (its profile is applied, and operations it cannot "
                "read are replaced where that is exact, else the rewrite refuses): 'auto' (default: the "
                f"installed runtime, {ov.get_version().split('-')[0]}) or a release such as 2026.0 or 2026.4.1; "
                f"releases {runtimes.version_string(runtimes.OLDEST_SUPPORTED[:2])} and newer")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``ovpass: error: <message> (see 'ovpass ... --help')``."""

    def error(self, message: str):  # noqa: D401 - argparse hook
        line = f"{message} (see '{self.prog} --help')"
        if STATE.json_errors:
            print_json_error(ErrorCode.USAGE, line)
        sys.stderr.write(f"ovpass: error: {line}\n")
        sys.exit(EXIT_USAGE)


def _add_common(sub: argparse.ArgumentParser, runtime: bool = True) -> None:
    sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help="show tracebacks and debug logging instead of one-line errors")
    if runtime:
        sub.add_argument("--runtime", default="auto", metavar="auto|VERSION", help=RUNTIME_HELP)
        for name, kind in MODES.items():   # one choice option per mode, its help from the members
            default = RewriteOptions.__dataclass_fields__[name].default
            sub.add_argument(f"--{name.replace('_', '-')}", choices=[m.value for m in kind], default=default.value,
                             help="; ".join(f"{m.value}{' (default)' if m is default else ''}"
                                            f"{': ' + m.description if m.description else ''}" for m in kind))
        sub.add_argument("--sliding-window-margin", type=int, default=0, metavar="N",
                         help="with --sliding-window bounded or trimmable: keep N positions more, so that a client "
                              "may take "
                              "back N (openvino_genai's stateful chat takes back each answer); a longer rollback "
                              "fails the inference (default 0)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ovpass",
        description="Rewrite, inspect and check OpenVINO IR files of LLMs: layers that share KV caches, and "
                    "sliding-window layers, whose caches --sliding-window bounded or trimmable keeps to the window "
                    "(docs/guides/sliding-window-trimmable.md).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version",
                        version=f"ovpass {ovpasses.__version__} (openvino {ov.get_version().split('-')[0]})")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = subs.add_parser(
        "rewrite", help="run the pipeline on an IR or an export folder and write the result",
        description="Read IN.xml (+ IN.bin), run the ovpasses pipeline for the runtime profile and write "
                    "OUT.xml (+ OUT.bin). Weights keep their element types; tensor names, friendly names "
                    "and runtime info are kept. The pair is replaced whole or not at all (a lock, a journal "
                    "and backups; an interrupted write is finished or undone by the next ovpass command in "
                    "that folder), and the input is never modified except by a successful --in-place. "
                    "IN may be an export folder (optimum-cli export openvino): every IR in it that holds "
                    "stateful attention is rewritten, every other file copied byte for byte (a symbolic link "
                    "as the file it points to, see --symlinks), into -o, a new folder (it appears whole) or an "
                    "empty one (filled; it keeps its mode, owner and ACLs). Ctrl-C, SIGTERM and SIGHUP wait "
                    "while files are renamed into place, then stop the run (exit 128 + the signal's number) "
                    "saying what was written.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml|DIR")
    p.add_argument("-o", "--output", metavar="OUT.xml|DIR",
                   help="where to write the rewritten IR (.bin beside it), or the folder for a folder")
    p.add_argument("--in-place", action="store_true", help="overwrite IN.xml and IN.bin, or the folder (safely, by rename)")
    p.add_argument("--dry-run", action="store_true", help="run the pipeline and print the summary; write nothing")
    p.add_argument("--for", dest="for_client", choices=("core", "optimum", "genai", "genai-paged"), metavar="CLIENT",
                   help="apply the form that pays for CLIENT (core, optimum, genai, genai-paged): from --from-bench "
                        "where given, else from the records; says which and why. Replaces the mode flags")
    p.add_argument("--context", type=_positive, metavar="N", help="with --for: the context the form should pay at")
    p.add_argument("--from-bench", metavar="FILE", help="with --for: the JSON of ovpass bench --format json")
    p.add_argument("--symlinks", choices=[m.value for m in folder.Symlinks], default=folder.Symlinks.COPY.value,
                   help="folders: " + "; ".join(f"{m.value}{' (default)' if m is folder.Symlinks.COPY else ''}: "
                                                f"{m.description}" for m in folder.Symlinks))
    p.add_argument("--passes", metavar="NAME,...",
                   help="run only these passes (names from 'ovpass passes'): the pipeline plans as usual, "
                        "the named passes do what they do in the full pipeline, the others are skipped and "
                        "the SDPAs they would change are reported as not applied")
    p.add_argument("--format", choices=("text", "json"), default="text", help="summary format (default text)")
    _add_common(p)

    p = subs.add_parser(
        "inspect", help="print the KV-sharing map: which SDPA reads which cache, and the planned action",
        description="Print which ScaledDotProductAttention reads which KV cache variable, who owns and who "
                    "borrows each cache, what 'ovpass rewrite' would do to each SDPA on the runtime, whether the "
                    "CPU plugin is expected to fuse each one into its stateful kernel and why, and what the KV "
                    "sharing lint finds (borrowers of another attention kind, caches no Assign writes). json "
                    f"follows the schema '{schemas.INSPECT}' (docs/architecture.md); dot is Graphviz text (needs the "
                    "graphviz package: pip install 'ovpasses[dot]'). For an export folder, each IR in it that "
                    f"holds stateful attention is reported (json: schema '{schemas.INSPECT_FOLDER}', a list of "
                    f"'{schemas.INSPECT}' reports).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml|DIR")
    p.add_argument("--format", choices=("text", "json", "dot"), default="text", help="output format (default text)")
    p.add_argument("--verbose", action="store_true",
                   help="text: add each SDPA's full name, its cache variables and each shared cache's readers")
    _add_common(p)

    p = subs.add_parser(
        "check", help="run the original and the rewritten model side by side and compare",
        description="Compile the original and the rewritten model, run a prefill and N decode steps with the "
                    "same inputs through each (input_ids, attention_mask, position_ids and beam_idx are "
                    "recognised; other inputs get seeded random data) and report whether each compiled and "
                    "ran, the largest output difference and the fused SDPA count of each. On CPU it compiles "
                    f"with {json.dumps(precision.EXACT_CPU_CONFIG)} unless --precision default. Both models run on "
                    "the installed OpenVINO: with --runtime naming another release, the target runtime is not "
                    "exercised (the report says so). Verdicts: OK (exit 0) both run and every output agrees "
                    "within atol + rtol * max|original output|, NaN in the same places and equal infinities "
                    "agreeing; FIXED (exit 0) the rewritten model runs, or gives finite values, where the "
                    "original does not, and agrees elsewhere; WORSE (exit 1) it fails or gives NaN where the "
                    "original does not, or the outputs differ at exact precision; INCONCLUSIVE (exit 4) nothing "
                    "could be compared, or the outputs differ at a precision that cannot decide (the verdict "
                    "names the tolerance it would need). "
                    "Where the original fails, the rewritten model is compared with the same IR with every SDPA "
                    "decomposed (run on the same runtime); FIXED needs it to agree. inputs_embeds and "
                    "per_layer_inputs are made from token ids through the export's embedding IRs beside the "
                    "model. For a folder, each IR that holds stateful attention is checked; the exit code is "
                    "the worst verdict's.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="IN.xml|DIR")
    p.add_argument("--device", default="CPU",
                   help="OpenVINO device, any case: cpu, GPU, gpu.0 (default CPU); one OpenVINO does not see is an "
                        "error that lists those it sees")
    p.add_argument("--steps", type=_non_negative, default=3, help="decode steps after the prefill (default 3)")
    p.add_argument("--prefill", type=_positive, default=None,
                   help="prefill length in tokens, for ov.Core and --genai (default 8; with --sliding-window bounded, "
                        "past what a bounded cache keeps, so that decode steps read it: a shorter one is INCONCLUSIVE)")
    p.add_argument("--prefill-chunk", type=_positive, default=None, metavar="N",
                   help="feed the prefill in inferences of at most N tokens (default: one inference), as a client "
                        "with chunked prefill does; with --sliding-window bounded, later chunks read a bounded cache")
    p.add_argument("--precision", choices=("exact", "default"), default="exact",
                   help="exact (default): CPU in f32 with an f32 KV cache and no dynamic quantization; default: "
                        "the device defaults, where outputs that differ beyond the tolerance are INCONCLUSIVE")
    p.add_argument("--atol", type=_tolerance, default=1e-4, help="absolute tolerance, finite, 0 or more (default 1e-4)")
    p.add_argument("--rtol", type=_tolerance, default=1e-4,
                   help="tolerance relative to the largest finite |original output|, finite, 0 or more (default 1e-4)")
    p.add_argument("--passes", metavar="NAME,...", help="rewrite with only these passes (as in 'ovpass rewrite')")
    p.add_argument("--data-shape", metavar="NAME[d0,d1,...],...",
                   help="fix the dims of inputs, benchmark_app's convention (e.g. per_layer_inputs[1,?,8,16]; ? or -1 "
                        "leaves a dim automatic: 1 for dim 0, the step's token count for the others)")
    p.add_argument("--genai", action="store_true",
                   help="folder only: also run openvino_genai (LLMPipeline or VLMPipeline) on the original and the "
                        "rewritten folder, stateful and with continuous batching, greedy, and compare the output")
    p.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    _add_common(p)

    p = subs.add_parser(
        "bench", help="measure every form of a model for a client on this machine, and say which one pays",
        description="Run the export folder DIR unmodified and in every form that changes it and that the client "
                    "can run (the default rewrite, --sliding-window bounded, trimmable with the library's trimmer, "
                    "trimmable with --first-prompt blocked, --kv-sharing unshare), each in a fresh process at the "
                    "plugin's defaults, the prompt fed as the client feeds it; then recommend the form for --goal and "
                    "print its command. Tokens are compared under the exact config on a short run. Each run takes "
                    "from seconds (tiny models) to minutes; Ctrl-C prints the rows done (exit 130).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", metavar="DIR")
    p.add_argument("--client", choices=("core", "optimum", "genai", "genai-paged"), default="core",
                   help="who runs the model: ov.Core (your program), optimum-intel (prompt whole), openvino_genai "
                        "stateful (ATTENTION_BACKEND=\"SDPA\") or with continuous batching, as OVMS (default core)")
    p.add_argument("--context", default="4096", metavar="N[,N...]",
                   help="prompt lengths in tokens, comma-separated (default 4096)")
    p.add_argument("--chunk", type=_non_negative, default=0, metavar="N",
                   help="feed the prompt in chunks of N tokens (core, optimum; default 0: whole)")
    p.add_argument("--steps", type=_positive, default=32, metavar="N", help="decode steps (default 32)")
    p.add_argument("--rounds", type=_positive, default=1, metavar="N",
                   help="run every form N times, the forms taking turns; each row holds the medians and the range "
                        "of the decode (default 1; 3 on a machine that is not quiet)")
    p.add_argument("--goal", choices=("memory", "speed"), default="memory",
                   help="memory: the least context memory among forms that decode no slower; speed: the fastest "
                        "decode that holds no more memory (default memory)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="report format (default text)")
    p.add_argument("--plot", metavar="FILE.png", help="memory and decode against context, per form (matplotlib)")
    _add_common(p, runtime=False)

    p = subs.add_parser("passes", help="list the passes of the pipeline, one line each",
                        description="List the passes of the pipeline in the order it runs them.")
    _add_common(p, runtime=False)
    return parser


def _whole(text: str, least: int, says: str) -> int:
    """``text`` as a whole number of ``least`` or more; argparse's own words for a type that fails name the
    function ("invalid _positive value"), so the words are said here."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, {says}, not {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {'at least 1' if least == 1 else says}, not {value}")
    return value


def _positive(text: str) -> int:
    return _whole(text, 1, "1 or more")


def _non_negative(text: str) -> int:
    return _whole(text, 0, "0 or more")


def _tolerance(text: str) -> float:
    try:
        return check.check_tolerance("it", float(text))
    except (ValueError, OvpassesError) as error:
        raise argparse.ArgumentTypeError(f"must be a finite number, 0 or more, not {text!r}") from error


def contexts(text_value: str) -> list[int]:
    try:
        contexts = [int(part) for part in text_value.split(",") if part.strip()]
    except ValueError:
        contexts = []
    if not contexts or min(contexts) < 1:
        raise OvpassesError(f"--context takes token counts of 1 or more, comma-separated (4096,16384), not "
                            f"{text_value!r}")
    return contexts
