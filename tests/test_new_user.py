"""What a new user hits around sliding windows (issue 50): each item of the issue, as a regression test on the
smallest fixture that shows it (tiny Gemma 3, gpt-oss and all-sliding Mistral exports, window 8; LFM2 and a
synthetic stack without sliding windows)."""

from __future__ import annotations

import sys
from pathlib import Path

import openvino as ov
import pytest

import ovpasses
from ovpasses.app import cli
from ovpasses.app.check import INCONCLUSIVE, OK, check_model, genai
from ovpasses.errors import InvalidOptionError, OvpassesError
from ovpasses.features.sliding_window.caches import trimmable_caches
from ovpasses.options import RewriteOptions
from testkit.cli import unwrapped
from testkit.graphs import StackSpec, build_stack

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SLIDING = ["gemma3/text6", "gpt-oss/tiny4", "mistral/allsliding"]
NO_SLIDING = FIXTURES / "lfm2" / "tiny4"
TRIMMABLE = RewriteOptions(sliding_window="trimmable")


def _read(fixture: str) -> ov.Model:
    return ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, "\n".join(unwrapped(out)), err


# -- check --sliding-window trimmable runs the library's trimmer ----------------------------------------------------

@pytest.mark.parametrize("fixture", SLIDING)
def test_check_trimmable_runs_the_trimmer_on_a_prompt_past_the_window_with_trims_in_between(fixture):
    """The prompt (20 tokens, window 8) is fed in chunks of 6 with a trim after each, then decode steps trimmed after
    each: every trimmable cache held its keep right after every trim, and the rewritten model, trimmed, agrees."""
    caches = _trimmable(fixture)
    keep = set(caches.values())
    report = check_model(_read(fixture), steps=3, prefill=20, prefill_chunk=6, options=TRIMMABLE)
    held = report.rewritten.trimmed_held
    assert report.verdict_code == OK and report.bounding_exercised, report
    assert held and set(held) == set(caches)
    assert all(counts and set(counts) <= keep for counts in held.values()), held
    # a trim between the prompt's chunks (after chunk 2 of 4, where the context first passes the keep), then after
    # each decode step
    assert report.rewritten.trimmed_after[0] < 3 and report.rewritten.trimmed_after[-1] == 3 + 3
    text = str(report)
    assert f"held {', '.join(map(str, held[sorted(held)[0]]))} positions after" in text
    assert "the comparison covers" in text and "read trimmed caches" in text
    data = report.to_dict()
    assert data["rewritten"]["trimmed_held"] == held and data["bounding_exercised"] is True


def _trimmable(fixture: str) -> dict[str, int]:
    model = _read(fixture)
    ovpasses.rewrite(model, options=TRIMMABLE)
    return trimmable_caches(model)


def test_check_trimmable_that_never_trimmed_says_so_and_is_not_ok():
    """A context that never passes the keep: nothing trimmed; agreeing outputs prove nothing of trimmed caches."""
    report = check_model(_read("mistral/allsliding"), steps=2, prefill=4, options=TRIMMABLE)
    assert report.rewritten.trimmed_after == [] and not report.bounding_exercised
    assert report.verdict_code == INCONCLUSIVE and "no compared inference read a trimmed cache" in report.verdict
    text = str(report)
    assert "nothing was trimmed" in text and "covers steps that read a bounded cache" not in text


def test_check_trimmable_cli_says_how_many_positions_each_trimmed_cache_held(capsys):
    code, out, _ = _run(capsys, "check", str(FIXTURES / "mistral" / "allsliding"), "--sliding-window", "trimmable",
                        "--prefill", "20", "--prefill-chunk", "6")
    assert code == 0, out
    assert "ran with the library's trimmer (SlidingWindowTrimmer" in out
    assert "8 caches held 7, 7, 7, 7, 7, 7 positions after their 6 trims"   # chunks 2-4, 3 steps in out
    assert "covers steps that read a bounded cache" not in out


# -- the payoff quotes the user's own family -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bounded", "trimmable"])
def test_the_payoff_quotes_no_other_familys_figures(mode, capsys):
    """Mistral was never measured: no Gemma 3 (or other) figure, and a pointer to ovpass bench."""
    for command in (["inspect"], ["rewrite", "--dry-run"]):
        code, out, _ = _run(capsys, command[0], str(FIXTURES / "mistral" / "allsliding"), *command[1:],
                            "--sliding-window", mode)
        assert code == 0
        assert not any(w in out for w in ("Gemma 3 4B", "gpt-oss-20b", "Gemma 4 E2B", "Gemma 2 2B")), out
        assert "not measured on mistral models; measure it on your machine: ovpass bench DIR" in out


@pytest.mark.parametrize("fixture, widths", [("gemma3/text6", "Gemma 3 4B"), ("gpt-oss/tiny4", "gpt-oss-20b")])
def test_the_payoff_quotes_the_users_family(fixture, widths, capsys):
    code, out, _ = _run(capsys, "inspect", str(FIXTURES / fixture), "--sliding-window", "trimmable")
    assert code == 0 and f"at {widths} widths" in out and "ovpass bench" not in out
    others = {"Gemma 3 4B", "gpt-oss-20b", "Gemma 4 E2B", "Gemma 2 2B"} - {widths}
    assert not any(w in out for w in others)


# -- the CLI speaks in its flags, the library in its keywords ---------------------------------------------------------

def test_first_prompt_blocked_without_trimmable(capsys):
    with pytest.raises(InvalidOptionError, match=r"^first_prompt=blocked needs sliding_window=trimmable"):
        RewriteOptions(first_prompt="blocked")
    code, out, err = _run(capsys, "rewrite", str(FIXTURES / "mistral" / "allsliding"), "--dry-run",
                          "--first-prompt", "blocked")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("ovpass: error: --first-prompt blocked needs --sliding-window trimmable")
    assert "first_prompt=" not in err and "sliding_window=" not in err


# -- a model without sliding-window layers ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["bounded", "trimmable"])
def test_a_model_without_sliding_windows_says_once_that_the_mode_has_no_effect(mode, capsys):
    line = "this model has no sliding-window layer: --sliding-window has no effect"
    for command in (["rewrite", "--dry-run"], ["inspect"]):
        code, out, _ = _run(capsys, command[0], str(NO_SLIDING), *command[1:], "--sliding-window", mode)
        assert code == 0 and out.count(line) == 1, out
        assert "changed nothing" not in out and "not trimmable" not in out and "not bounded" not in out


@pytest.mark.parametrize("mode", ["bounded", "trimmable"])
def test_a_mode_without_effect_writes_the_default_rewrite(mode, tmp_path):
    """The summary agrees with what was written: the mode changes no node (the trimmable form's release points and
    mask expands are not applied where no cache is trimmable), so the IR is the default rewrite's."""
    model = build_stack(StackSpec())
    default, asked = model.clone(), model.clone()
    before = ovpasses.rewrite(default)
    summary = ovpasses.rewrite(asked, sliding_window=mode)
    assert {p.name: p.changed for p in summary.passes if p.changed} == \
        {p.name: p.changed for p in before.passes if p.changed}
    assert "sliding_window" in summary.no_effect() and not summary.sliding_window_caches.has_sliding_layer
    ov.save_model(default, tmp_path / "default.xml")
    ov.save_model(asked, tmp_path / "asked.xml")
    assert (tmp_path / "default.xml").read_bytes() == (tmp_path / "asked.xml").read_bytes()


# -- inspect and help in a user's words ------------------------------------------------------------------------------

def test_plain_inspect_of_a_sliding_window_model_names_the_modes_that_pay(capsys):
    code, out, _ = _run(capsys, "inspect", str(FIXTURES / "gemma3" / "text6"))
    lines = [line for line in out.splitlines() if "--sliding-window trimmable" in line]
    assert code == 0 and len(lines) == 1 and "5 of 6 layers attend to a window of 8 positions" in lines[0]
    code, out, _ = _run(capsys, "inspect", str(NO_SLIDING))
    assert "--sliding-window" not in out


def test_trimmable_inspect_reads_as_a_user_reads(capsys):
    code, out, _ = _run(capsys, "inspect", str(FIXTURES / "gpt-oss" / "tiny4"), "--sliding-window", "trimmable")
    assert code == 0
    assert "in the element types the IR declares" in out and "what your program holds" in out \
        and "what ovpass check holds" in out
    for jargon in ("every - 1", " B per token", "other states", " x2", "(fixed profile)",
                   "reads the window as it is", "full attention\n"):
        assert jargon not in out, jargon
    assert "(1.0 KiB per token)" in out and "256 bytes per position" in out
    assert "full-attention layers 1, 3: cache kept whole" in out


def test_the_rewrite_does_not_call_full_attention_caches_not_trimmable(capsys):
    code, out, _ = _run(capsys, "rewrite", str(FIXTURES / "gemma3" / "text6"), "--dry-run", "--sliding-window",
                        "trimmable")
    assert code == 0 and "not trimmable" not in out
    assert "kept whole: 2 caches of full-attention layers, which read every position" in out


def test_help_mentions_sliding_windows(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "--sliding-window" in capsys.readouterr().out


# -- refused instead of misread --------------------------------------------------------------------------------------

def test_a_folder_rewritten_to_an_xml_name_is_refused(capsys, tmp_path):
    target = tmp_path / "y1.xml"
    code, _, err = _run(capsys, "rewrite", str(FIXTURES / "mistral" / "allsliding"), "-o", str(target))
    assert code == 2 and err.count("\n") == 1 and "names an IR file" in err
    assert not target.exists()


def test_a_margin_without_a_sliding_window_mode_is_refused(capsys):
    code, _, err = _run(capsys, "rewrite", str(FIXTURES / "mistral" / "allsliding"), "--dry-run",
                        "--sliding-window-margin", "4")
    assert code == 2 and err.count("\n") == 1
    assert "--sliding-window-margin 4 needs --sliding-window bounded or trimmable" in err
    code, _, _ = _run(capsys, "rewrite", str(FIXTURES / "mistral" / "allsliding"), "--dry-run",
                      "--sliding-window-margin", "4", "--sliding-window", "trimmable")
    assert code == 0


def test_the_genai_check_names_the_extra_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)   # as if not installed: the import fails
    with pytest.raises(OvpassesError, match=r"pip install 'ovpasses\[genai\]'"):
        genai.check_folders(tmp_path, tmp_path)


# -- the guide --------------------------------------------------------------------------------------------------------

def test_the_guide_keeps_the_optimum_model_names_its_config_and_prints_what_was_trimmed():
    """The ov.Core snippet runs in tests/test_docs.py; here, what it and the optimum-intel one say."""
    guide = (ROOT / "docs" / "guides" / "sliding-window-trimmable.md").read_text()
    assert "SlidingWindowTrimmer.attach(OVModelForCausalLM" not in guide
    assert "trimmer = SlidingWindowTrimmer.attach(ov_model" in guide and "ov_model.generate(" in guide
    assert "EXACT_CPU_CONFIG" in guide and "compile_model(model, \"CPU\", EXACT_CPU_CONFIG)" in guide
    assert "print(f\"{trimmer.trims} cuts" in guide
