"""RewriteOptions: one typed value for what a rewrite does, validated once where it is made, and taken by every
entry point (rewrite, compile_model, inspect, check, the folder flow, the CLI)."""

import ast
import dataclasses
import json
from pathlib import Path

import pytest

import ovpasses
from ovpasses import FirstPrompt, InvalidOptionError, KVSharing, PagedHeads, RewriteOptions, SlidingWindow, UnknownPassError
from ovpasses.app.arguments import build_parser
from ovpasses.options import MODES, PASS_NAMES
from ovpasses.registry import PIPELINE_ORDER
from ovpasses.pipeline import STEPS
from ovpasses.plan.profiles import profile_for
from ovpasses.app.files.io import read_ir
from ovpasses.report.inspect import inspect_model
from testkit.cli import run_main
from testkit.graphs import StackSpec, build_stack

TINY8 = Path(__file__).resolve().parent / "fixtures" / "gemma4" / "tiny8"
WINDOW = 16   # tiny8's sliding window


def test_modes_are_enums_and_strings_are_parsed_once():
    options = RewriteOptions(runtime="2026.0", passes="DisableStatefulSDPAFusion", kv_sharing="unshare",
                             sliding_window="bounded", paged_heads="pad", sliding_window_margin=3)
    assert options.kv_sharing is KVSharing.UNSHARE and options.sliding_window is SlidingWindow.BOUNDED
    assert options.paged_heads is PagedHeads.PAD and options.sliding_window_margin == 3
    assert options.runtime == profile_for("2026.0") and options.profile is options.runtime
    assert options.passes == frozenset({"DisableStatefulSDPAFusion"})
    assert RewriteOptions().passes == frozenset(PASS_NAMES) and RewriteOptions().runtime == profile_for()
    assert MODES == {"kv_sharing": KVSharing, "sliding_window": SlidingWindow, "paged_heads": PagedHeads,
                     "first_prompt": FirstPrompt}
    assert RewriteOptions(sliding_window="trimmable", first_prompt="blocked").first_prompt is FirstPrompt.BLOCKED
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.kv_sharing = KVSharing.KEEP
    # a copy with one field changed is validated as well
    assert dataclasses.replace(options, kv_sharing=KVSharing.KEEP).runtime == options.runtime
    with pytest.raises(InvalidOptionError, match="kv_sharing must be one of keep, unshare, not 'nope'"):
        dataclasses.replace(options, kv_sharing="nope")


@pytest.mark.parametrize("field, value, message", [
    ("kv_sharing", "share", "kv_sharing must be one of keep, unshare, not 'share'"),
    ("sliding_window", "half", "sliding_window must be one of full, bounded, trimmable, not 'half'"),
    ("paged_heads", None, "paged_heads must be one of keep, pad, not None"),
    ("sliding_window_margin", -1, "sliding_window_margin must be a whole number of positions >= 0, not -1"),
    ("sliding_window_margin", 1.5, "sliding_window_margin must be a whole number of positions >= 0, not 1.5"),
    ("sliding_window_margin", True, "sliding_window_margin must be a whole number of positions >= 0, not True"),
])
def test_a_bad_value_is_an_invalid_option_error_that_names_what_is_valid(field, value, message):
    with pytest.raises(InvalidOptionError) as raised:
        RewriteOptions(**{field: value})
    assert str(raised.value) == message


def test_unknown_passes_and_runtimes_are_refused_at_construction():
    with pytest.raises(UnknownPassError, match="unknown pass NoSuchPass; valid names: EagerAttentionToSDPA, "):
        RewriteOptions(passes="NoSuchPass")
    with pytest.raises(ovpasses.UnsupportedRuntimeError, match="is not an OpenVINO release"):
        RewriteOptions(runtime="2026.x")
    assert issubclass(UnknownPassError, InvalidOptionError) and issubclass(InvalidOptionError, ovpasses.OvpassesError)


def test_the_pass_names_follow_the_pipeline():
    assert PIPELINE_ORDER == tuple(step.rule for step in STEPS)
    assert set(ovpasses.passes.__all__) <= {rule.__name__ for rule in PIPELINE_ORDER}
    assert {rule.__name__ for rule in PIPELINE_ORDER} <= set(ovpasses.__all__)
    assert all(getattr(ovpasses, rule.__name__) is rule for rule in PIPELINE_ORDER)


def test_rewrite_takes_options_or_the_keywords_not_both():
    by_keywords = ovpasses.rewrite(build_stack(StackSpec()), "2026.0", kv_sharing="unshare")
    options = RewriteOptions(runtime="2026.0", kv_sharing=KVSharing.UNSHARE)
    by_options = ovpasses.rewrite(build_stack(StackSpec()), options=options)

    def without_times(summary):
        return {k: v for k, v in summary.to_dict().items() if k != "passes"} | {
            "passes": [(p.name, len(p.changed)) for p in summary.passes]}   # auto-made names differ per build

    assert without_times(by_keywords) == without_times(by_options)
    assert by_options.kv_sharing is KVSharing.UNSHARE and by_options.unshared
    with pytest.raises(InvalidOptionError, match=r"either as options= or as keywords, not both \(got options= and "
                                                 r"kv_sharing=\)"):
        ovpasses.rewrite(build_stack(StackSpec()), options=options, kv_sharing="keep")
    with pytest.raises(InvalidOptionError, match="options must be a RewriteOptions, not dict"):
        ovpasses.rewrite(build_stack(StackSpec()), options={"kv_sharing": "unshare"})


def test_inspect_honours_the_margin():
    """inspect took kv_sharing, sliding_window and paged_heads but not sliding_window_margin: its report of a
    bounded cache said W-1 where the rewrite keeps W-1+margin."""
    model = read_ir(TINY8 / "openvino_model.xml")
    report = inspect_model(model, RewriteOptions(sliding_window=SlidingWindow.BOUNDED, sliding_window_margin=5))
    keeps = {b["keep"] for b in report["sliding_window_caches"]["bounded"]}
    assert keeps == {WINDOW - 1 + 5}


def test_the_cli_offers_every_member_of_every_mode():
    """The CLI's choices and help come from the enums: a new member is an option value without a CLI edit."""
    parser = build_parser()
    rewrite = next(a for a in parser._subparsers._group_actions[0].choices["rewrite"]._actions
                   if a.dest == "sliding_window")
    assert rewrite.choices == [m.value for m in SlidingWindow] and rewrite.default == "full"
    assert all(m.value in rewrite.help and m.description in rewrite.help for m in SlidingWindow)
    result = run_main("inspect", TINY8, "--sliding-window", "bounded", "--sliding-window-margin", "2", "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    keeps = {b["keep"] for m in report["models"] for b in m["report"]["sliding_window_caches"]["bounded"]}
    assert keeps == {WINDOW - 1 + 2}


# the application: the modules that may spell an option as a flag (the CLI, the file layer, the check and
# the text they print)
APPLICATION = ("app/",)


def _strings_outside_docstrings(tree: ast.AST):
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_the_library_writes_no_option_flag_text():
    """The library says which option mends what as data (OptionChoice); the application renders the flag."""
    root = Path(ovpasses.__file__).parent
    flags = [f"--{name.replace('_', '-')}" for name in MODES] + ["--sliding-window-margin", "ovpass rewrite"]
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(APPLICATION):
            continue
        for node in _strings_outside_docstrings(ast.parse(path.read_text())):
            found += [f"{relative}:{node.lineno}: {flag}" for flag in flags if flag in node.value]
    assert not found, found


def test_paged_warnings_are_data_and_the_edge_renders_them():
    """What no rewrite mends on the paged path is a risk, the option that mends it and the release that fixes it;
    the sentence (with the flag) is rendered by report.text, and the JSON carries the sentence as before."""
    from ovpasses.modes import OptionChoice
    from ovpasses.features.paged_heads.paged_path import PagedRisk
    from ovpasses.app.render.text import paged_warning_text, summary_text, with_warning_texts

    model = read_ir(TINY8.parent / "e2b35" / "openvino_model.xml")
    summary = ovpasses.rewrite(model, "2026.0")
    (warning,) = summary.warnings
    assert warning.risk == PagedRisk.MIXED_HEAD_SIZES and warning.option == OptionChoice("paged_heads", PagedHeads.PAD)
    assert warning.fixed_in == (2026, 3, 0) and warning.runtime == (2026, 0, 0)
    text = paged_warning_text(warning)
    assert "ovpass rewrite --paged-heads pad (paged_heads='pad') gives every layer one" in text
    assert summary.to_dict()["warnings"] == [warning.to_dict()] and f"warning: {text}" in summary_text(summary)
    assert with_warning_texts(summary.to_dict())["warnings"] == [text]   # what ovpass prints in JSON
