"""``ovpass bench`` and ``ovpass rewrite --for`` (issue 49): every form a client can run, measured in a process of
its own on this machine, the recommendation read from the rows, and every bad input one line.

Timings on tiny fixtures are noise: the end-to-end tests assert what the rows say of the forms (which ran, their
fused kernels, their tokens against the unmodified model's under the exact config, the trimmed KV), and the
recommendation is tested on rows given to it (:func:`recommend` is pure)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovpasses.app.bench import SCHEMA, BenchReport, BenchRow, recommend
from testkit.cli import run_main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
GEMMA3 = FIXTURES / "gemma3" / "text6"     # sliding window W = 8: bounded, trimmable, trimmable+blocked apply
OVPASS = Path(sys.executable).parent / "ovpass"


def bench_json(*args) -> tuple[dict, str]:
    result = run_main("bench", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr


def test_bench_core_measures_each_form_in_its_own_process():
    data, progress = bench_json(GEMMA3, "--client", "core", "--context", "40,200", "--steps", "4")
    assert data["schema"] == SCHEMA and data["client"] == "core"
    forms = ["unmodified", "bounded", "trimmable", "trimmable+blocked"]
    assert [(r["form"], r["context"]) for r in data["rows"]] == [(f, c) for c in (40, 200) for f in forms]
    assert set(data["skipped"]) == {"default", "unshare"}
    assert progress.count("bench: [") == 8   # a progress line per run
    rows = {(r["form"], r["context"]): r for r in data["rows"]}
    for row in data["rows"]:
        assert row["error"] is None and row["tokens_equal"] is True, row
        assert row["peak_rss_mib"] > row["context_mib"] > 0 and row["prefill_s"] > 0 and row["decode_ms"] > 0
    # the plugin fuses every layer of the unmodified and the trimmable forms, the full layer only when bounded
    assert rows[("unmodified", 200)]["fused"] == rows[("trimmable", 200)]["fused"] == 6
    assert rows[("bounded", 200)]["fused"] == 1
    assert rows[("trimmable", 200)]["kv_mib"] < rows[("unmodified", 200)]["kv_mib"]   # trimmed to the window
    rec = data["recommended"]
    assert rec["context"] == 200 and rec["form"] in forms and rec["why"]
    assert (rec["command"] is None) == (rec["form"] == "unmodified")


@pytest.mark.slow   # 8 workers; the medians and ranges of a row are test_a_row_is_the_median_of_its_runs' (pure)
def test_bench_rounds_take_turns_and_give_medians_with_their_range():
    """--rounds 2: every form runs twice, the forms taking turns (all of round 1, then round 2), and a row holds the
    medians of its two runs with the range of their decode."""
    data, progress = bench_json(GEMMA3, "--client", "core", "--context", "40", "--steps", "2", "--rounds", "2")
    lines = [line for line in progress.splitlines() if line.startswith("bench: [")]
    forms = [r["form"] for r in data["rows"]]
    assert len(lines) == 2 * len(forms) and forms[0] == "unmodified"
    assert [line.split("] ")[1].split(",")[0] for line in lines] == forms * 2   # turns, not one form twice
    assert all(f"round {n} of 2" in line for n, half in ((1, lines[:len(forms)]), (2, lines[len(forms):]))
               for line in half)
    for row in data["rows"]:
        low, high = row["decode_ms_range"]
        assert row["rounds"] == 2 and low <= row["decode_ms"] <= high and row["tokens_equal"] is True, row


def test_a_row_is_the_median_of_its_runs():
    """The row of a form's runs, read from the runs' results (pure): the median of each figure, the decode range, a
    failed run left out, and the row failed where every run failed."""
    from ovpasses.app.bench.run import _row

    runs = [{"peak_rss_mib": 100.0, "context_mib": 10.0, "kv_mib": 1.0, "prefill_s": 1.0, "decode_ms": 30.0, "fused": 6},
            {"error": "killed"},
            {"peak_rss_mib": 120.0, "context_mib": 14.0, "kv_mib": 1.0, "prefill_s": 3.0, "decode_ms": 10.0, "fused": 6},
            {"peak_rss_mib": 110.0, "context_mib": 12.0, "kv_mib": 1.0, "prefill_s": 2.0, "decode_ms": 20.0, "fused": 6}]
    short = {"unmodified": [1, 2], "bounded": [1, 2]}
    row = _row("bounded", 40, 0, None, runs, short)
    assert (row.peak_rss_mib, row.context_mib, row.prefill_s, row.decode_ms, row.fused) == (110.0, 12.0, 2.0, 20.0, 6)
    assert row.rounds == 3 and row.decode_ms_range == [10.0, 30.0] and row.error is None and row.tokens_equal
    failed = _row("bounded", 40, 0, None, [{"error": "killed"}, {"error": "out of memory"}], short)
    assert failed.error == "out of memory" and failed.decode_ms is None and failed.rounds == 2
    one = _row("unmodified", 40, 0, None, runs[:1], short)
    assert one.decode_ms_range is None and one.rounds == 1


def test_bench_genai_paths_run_the_forms_genai_can():
    pytest.importorskip("openvino_genai")
    data, _ = bench_json(GEMMA3, "--client", "genai", "--context", "40", "--steps", "4")
    assert [r["form"] for r in data["rows"]] == ["unmodified", "bounded", "trimmable+blocked"]
    assert all(r["error"] is None and r["tokens_equal"] for r in data["rows"]), data["rows"]
    data, _ = bench_json(GEMMA3, "--client", "genai-paged", "--context", "40", "--steps", "4")
    assert [r["form"] for r in data["rows"]] == ["unmodified"] and data["rows"][0]["kv_mib"] is None


def test_bench_on_a_model_no_form_changes_measures_the_unmodified_one_and_says_so():
    result = run_main("bench", FIXTURES / "lfm2" / "tiny4", "--context", "16", "--steps", "2")
    assert result.returncode == 0, result.stderr
    assert "not measured: default: the default rewrite changes nothing on this model" in result.stdout
    assert "not measured: bounded: no cache is read by sliding-window layers only" in result.stdout
    assert "recommended for memory, at 16 tokens: unmodified" in result.stdout


def row(form: str, context_mib: float, decode_ms: float, equal: bool | None = True) -> BenchRow:
    return BenchRow(form, 4096, 0, peak_rss_mib=1000 + context_mib, context_mib=context_mib, decode_ms=decode_ms,
                    tokens_equal=equal)


@pytest.mark.parametrize("goal, rows, form", [
    ("memory", [row("unmodified", 800, 50), row("trimmable", 300, 45), row("bounded", 200, 80)], "trimmable"),
    ("memory", [row("unmodified", 800, 50), row("trimmable", 300, 54)], "trimmable"),      # within 10 %
    ("memory", [row("unmodified", 800, 50), row("trimmable", 300, 45, equal=False)], "unmodified"),
    ("speed", [row("unmodified", 800, 50), row("unshare", 900, 30), row("trimmable", 700, 40)], "trimmable"),
    ("speed", [row("unmodified", 800, 50), row("bounded", 200, 80)], "unmodified"),
])
def test_recommend_reads_the_rows(goal, rows, form):
    rec = recommend(BenchReport("m", "core", goal, rows=rows), goal)
    assert rec["form"] == form, rec
    assert (rec["trimmer"] is not None) == (form == "trimmable")
    if form == "trimmable":
        assert rec["command"] == "ovpass rewrite m -o m-trimmable --sliding-window trimmable"
        assert rec["trimmer"][0] == "from ovpasses import SlidingWindowTrimmer"


def test_without_the_unmodified_model_it_recommends_what_runs_with_its_tokens():
    """E2B widths, 16k fed whole, on a 23 GiB machine (benchmarks/records/2026-12-07-bench-e2b-16k-whole.md): the
    unmodified model and three forms are skipped by their estimates, unshare runs. The advice is the form that runs
    with the unmodified model's tokens (on the short run), saying why; none where no form that ran gave them."""
    from ovpasses.app.render.bench import bench_text

    skipped = BenchRow("unmodified", 4096, 0, skipped="needs about 51,781 MiB, 23,499 MiB available")
    rows = [skipped, BenchRow("bounded", 4096, 0, skipped="needs about 51,585 MiB, 22,898 MiB available"),
            row("unshare", 5302, 196.5), row("trimmable", 4000, 150, equal=False)]
    for goal in ("memory", "speed"):
        report = BenchReport("m", "core", goal, rows=rows)
        report.recommended = rec = recommend(report, goal)
        assert rec["form"] == "unshare" and rec["command"] == "ovpass rewrite m -o m-unshare --kv-sharing unshare", rec
        assert rec["why"].startswith("the unmodified model does not run at 4,096 tokens here (skipped: needs about "
                                     "51,781 MiB"), rec["why"]
        assert "in chunks (--chunk) the unmodified model may fit" in rec["why"]
        assert "recommended for " + goal + ", at 4,096 tokens: unshare: " in bench_text(report)
    report = BenchReport("m", "genai", "memory", rows=[skipped, row("trimmable", 4000, 150, equal=False)])
    assert recommend(report, "memory") is None
    nothing = ("recommended: nothing (the unmodified model did not run, and no form that ran is known to give its "
               "tokens)")
    assert nothing in bench_text(report)
    assert "recommended: nothing (no run finished)" in bench_text(BenchReport("m", "core", "memory", rows=[skipped]))


@pytest.mark.parametrize("args, says", [
    (["tests/fixtures"], "no IR in this folder"),
    ([str(GEMMA3), "--context", "1000000000"], "no form fits: the least, "),
    ([str(GEMMA3), "--context", "0"], "--context takes token counts of 1 or more"),
    ([str(GEMMA3 / "openvino_model.xml")], "give the folder, not a file"),
    ([str(GEMMA3), "--client", "genai", "--chunk", "8"], "feeds the prompt whole"),
    ([str(GEMMA3), "--rounds", "0"], "argument --rounds: must be at least 1"),
    # was: "invalid _positive value: 'two'", the name of a function of ovpass's
    ([str(GEMMA3), "--rounds", "two"], "argument --rounds: must be a whole number, 1 or more, not 'two'"),
    ([str(GEMMA3), "--chunk", "-3"], "argument --chunk: must be 0 or more, not -3"),
])
def test_bench_refuses_bad_input_in_one_line(args, says):
    result = run_main("bench", *args, cwd=ROOT)
    assert result.returncode == 2, result
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bench_refuses_a_client_whose_package_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)   # as where it is not installed: import fails
    result = run_main("bench", GEMMA3, "--client", "genai", "--context", "16")
    assert result.returncode == 2 and "pip install 'ovpasses[genai]'" in result.stderr


def children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in out.splitlines()[1:]
            if int(line.split()[1]) == pid and "ovpasses.app.bench.worker" in line}


def alive(pids: set[int]) -> set[int]:
    gone = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            gone.add(pid)
    return pids - gone


def test_ctrl_c_prints_the_rows_done_and_leaves_no_process():
    proc = subprocess.Popen([str(OVPASS), "bench", str(GEMMA3), "--context", "40,60,80,100,120,140", "--steps", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, workers = [], set()
    while len(seen) < 4:   # the 3rd run has started: two rows are done
        line = proc.stderr.readline()
        assert line, proc.communicate()
        if line.startswith("bench: ["):
            seen.append(line)
    deadline = time.monotonic() + 30
    while not workers and time.monotonic() < deadline:   # the worker of the run under way
        workers = children(proc.pid)
        time.sleep(0.05)
    assert workers
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted: the rows above are the runs that finished" in out and "unmodified" in out
    assert not alive(workers), "a worker outlived the Ctrl-C"


# one export per family (tests/fixtures/FAMILIES.md, HYBRIDS.md), and what the records advise each client, by what
# the family is (the fixtures' documents, not the analysis): caches that only sliding-window layers read are trimmed
# by a program (core, optimum); genai stateful gets the blocked first prompt where it takes them, which it does not
# in KV-shared models (docs/guides/first-prompt-blocked.md); the hybrids' states and Llama 4's chunked attention are
# no sliding window; the paged path gets the default rewrite
SLIDING = {"gemma2/tiny4", "gemma3/text6", "gpt-oss/tiny4", "cohere2/tiny4", "exaone4/tiny4", "mistral/allsliding",
           "gemma4/tiny8", "gemma3n/tiny8"}
KV_SHARED = {"gemma4/tiny8", "gemma3n/tiny8"}
NOT_SLIDING = {"qwen3_5/tiny4", "qwen3_next/tiny4", "lfm2/tiny4", "granite4/tiny4", "zamba2/tiny", "llama4/tiny4"}


CLIENTS = ["core", "optimum", "genai", "genai-paged"]
# the default run: every family for genai (whose advice depends on the most: sliding, KV-shared or neither) and
# every client on one family of each kind; the slow tier the rest of the product (56 cases)
EACH_KIND = {"gemma3/text6", "gemma4/tiny8", "qwen3_5/tiny4"}
FOR_CASES = [pytest.param(fixture, client,
                          marks=[] if client == "genai" or fixture in EACH_KIND else [pytest.mark.slow])
             for fixture in sorted(SLIDING | NOT_SLIDING) for client in CLIENTS]


@pytest.mark.parametrize("fixture, client", FOR_CASES)
def test_rewrite_for_a_client_says_which_form_and_why(fixture, client, tmp_path):
    result = run_main("rewrite", FIXTURES / fixture, "-o", tmp_path / "out", "--for", client, "--context", "4096")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"--for {client}: "), first
    form = first.split(": ")[1]
    sliding = fixture in SLIDING
    expected = {"core": "trimmable" if sliding else "default", "optimum": "trimmable" if sliding else "default",
                "genai": "trimmable+blocked" if sliding and fixture not in KV_SHARED else "default",
                "genai-paged": "default"}[client]
    assert form == expected, result.stdout
    assert (tmp_path / "out" / "openvino_model.xml").exists()


def test_every_family_has_a_rewrite_for_case():
    """The cases above hold one export of every family among the fixtures (a new family gets its line there)."""
    families = {path.parent.relative_to(FIXTURES).parts[0] for path in FIXTURES.glob("*/*/openvino_model.xml")}
    assert families - {"mamba"} == {case.split("/")[0] for case in SLIDING | NOT_SLIDING}


def test_rewrite_for_refuses_a_model_without_attention_in_one_line(tmp_path):
    result = run_main("rewrite", FIXTURES / "mamba" / "tiny", "-o", tmp_path / "out", "--for", "core")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists()


def _bad_for_input(kind: str, tmp: Path) -> Path:
    """An input ``rewrite --for`` must refuse in one line, as the rewrite refuses it."""
    if kind == "missing":
        return tmp / "nothere.xml"
    if kind == "empty file":
        (tmp / "m.xml").write_bytes(b"")
        return tmp / "m.xml"
    if kind == "truncated":
        source = FIXTURES / "gemma4" / "tiny8" / "openvino_model.xml"
        (tmp / "m.xml").write_bytes(source.read_bytes()[:300])
        shutil.copy(source.with_suffix(".bin"), tmp / "m.bin")
        return tmp / "m.xml"
    if kind == "empty folder":
        (tmp / "export").mkdir()
        return tmp / "export"
    return {"tokenizer IR": FIXTURES / "gemma4" / "tiny8" / "openvino_tokenizer.xml",
            "image-text export": FIXTURES / "gemma4" / "vlm8",
            "no attention, file": FIXTURES / "mamba" / "tiny" / "openvino_model.xml"}[kind]


# was: exit 3 ("unexpected RuntimeError") with OpenVINO's own message for each of these but the last, which
# printed its --for line before the refusal
@pytest.mark.parametrize("client", ["core", "genai-paged"])
@pytest.mark.parametrize("kind", ["missing", "empty file", "truncated", "empty folder", "tokenizer IR",
                                  "image-text export", "no attention, file"])
def test_rewrite_for_refuses_what_the_rewrite_refuses_in_one_line(kind, client, tmp_path):
    source = _bad_for_input(kind, tmp_path)
    result = run_main("rewrite", source, "-o", tmp_path / "out", "--for", client)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "unexpected" not in result.stderr, result.stderr
    assert result.stdout == "" and not (tmp_path / "out").exists()
    if kind == "image-text export":
        assert "give the mode flags yourself" in result.stderr
    if kind == "tokenizer IR":   # the same words whether openvino_tokenizers was imported before or not (below)
        assert "holds no stateful attention" in result.stderr, result.stderr


def test_rewrite_for_refuses_a_tokenizer_ir_where_openvino_can_read_it(tmp_path):
    """Was: in a process that had imported openvino_tokenizers (an xdist worker after a genai test), OpenVINO read
    the tokenizer IR, and ``--for`` printed its line before the rewrite failed; the test above passed or failed
    by the order of the tests. The IR's layers are read before OpenVINO reads it now."""
    tokenizer = _bad_for_input("tokenizer IR", tmp_path)
    code = ("import sys, openvino_tokenizers\nfrom ovpasses.app.cli import main\n"
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, "rewrite", str(tokenizer), "-o", str(tmp_path / "out"),
                           "--for", "core"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "holds no stateful attention" in proc.stderr, proc.stderr


def test_a_model_openvino_cannot_read_is_refused_in_one_line_by_bench_and_rewrite_for(tmp_path):
    """An IR whose XML parses but names a port no layer has (found by the fuzz, seed 74): both ended in exit 3 with
    OpenVINO's message, which their checks of the folder (its XML walked) had let through."""
    folder = tmp_path / "export"
    shutil.copytree(FIXTURES / "gemma4" / "tiny8", folder)
    xml = folder / "openvino_model.xml"
    text = xml.read_text()
    edge = re.search(r'from-port="(\d+)"', text)
    xml.write_text(text[:edge.start()] + 'from-port="987"' + text[edge.end():])
    for args in (["bench", folder, "--client", "core", "--context", "32"],
                 ["rewrite", folder, "-o", tmp_path / "out", "--for", "core"]):
        result = run_main(*args)
        assert result.returncode == 2, (args[0], result.returncode, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "unexpected" not in result.stderr, result.stderr
        assert "openvino_model.xml" in result.stderr and not (tmp_path / "out").exists()


def test_rewrite_for_reads_a_bench_report_of_the_same_client(tmp_path):
    report = BenchReport(str(GEMMA3), "core", "memory",
                         rows=[row("unmodified", 800, 50), row("trimmable", 300, 45)])
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(report.to_dict()))
    result = run_main("rewrite", GEMMA3, "--dry-run", "--for", "core", "--from-bench", path)
    assert result.returncode == 0 and result.stdout.startswith("--for core: trimmable: ovpass bench at 4,096 tokens")
    other = run_main("rewrite", GEMMA3, "--dry-run", "--for", "genai", "--from-bench", path)
    assert other.returncode == 2 and "measured --client core, not genai" in other.stderr
    flags = run_main("rewrite", GEMMA3, "--dry-run", "--for", "core", "--sliding-window", "bounded")
    assert flags.returncode == 2 and "--for picks the form itself: drop --sliding-window" in flags.stderr


def test_the_trimmer_is_public_api():
    import ovpasses
    from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer

    assert ovpasses.SlidingWindowTrimmer is SlidingWindowTrimmer and "SlidingWindowTrimmer" in ovpasses.__all__
    assert os.path.exists(ROOT / "docs" / "library.md") and "SlidingWindowTrimmer" in \
        (ROOT / "docs" / "library.md").read_text()


def test_the_exact_run_goes_past_the_widest_window_and_a_failed_one_is_said():
    from ovpasses.app.bench.run import widest_window

    assert widest_window(GEMMA3) == 8 and widest_window(FIXTURES / "lfm2" / "tiny4") == 0
    failed = row("trimmable", 300, 45, equal=None)
    failed.tokens_error = "the exact run failed: boom"
    rec = recommend(BenchReport("m", "core", "memory", rows=[row("unmodified", 800, 50), failed]), "memory")
    assert rec["form"] == "unmodified" and "could not be compared" in rec["why"] and "boom" in rec["why"]


def test_the_estimate_holds_the_unfused_layers_whole_scores():
    """text6: 6 layers of 4 query heads, the first 5 sliding (W = 8), the bounded caches keeping 7 positions. Bounded,
    those 5 leave the fused kernel and hold their scores, query heads x rows x keys in f32; fed in chunks, the fused
    layer holds its kernel's buffer for the chunk's rows over the whole context."""
    from ovpasses.app.bench.estimate import HELD_SCORE_MATRICES
    from ovpasses.app.bench.run import forms_that_apply

    whole = forms_that_apply(GEMMA3, "core", [200]).estimates
    chunked = forms_that_apply(GEMMA3, "core", [200], chunk=50).estimates
    assert HELD_SCORE_MATRICES >= 5
    assert whole["bounded", 200].scores == 5 * 4 * 200 * 200 * 4
    assert chunked["bounded", 200].scores == 5 * 4 * 50 * (7 + 50) * 4 + 4 * 50 * 200 * 4
    assert whole["unmodified", 200].scores == whole["trimmable+blocked", 200].scores == 0
    assert chunked["unmodified", 200].scores == 4 * 50 * 200 * 4
    # a trimmed cache holds its keep and a chunk at most; the bounded ones hold their keep, as a plain state
    assert chunked["trimmable", 200].kv < whole["trimmable", 200].kv == whole["unmodified", 200].kv
    assert whole["bounded", 200].kv < whole["unmodified", 200].kv
    # tiny8 (Gemma 4): the layers that read another layer's cache stay out of the kernel unless it is unshared
    shared = forms_that_apply(FIXTURES / "gemma4" / "tiny8", "core", [200]).estimates
    assert shared["unmodified", 200].scores > 0 and shared["unshare", 200].scores == 0


@pytest.mark.parametrize("fixture, measured", [
    # bounded holds the sliding layers' scores (the slow tier's: three forms measured, one process each)
    pytest.param("gemma3/text6", {"unmodified", "trimmable", "trimmable+blocked"}, marks=pytest.mark.slow),
    ("gemma4/tiny8", {"unshare"}),   # the unmodified model too: its tokens are still the reference
])
def test_bench_skips_a_form_whose_estimate_exceeds_the_memory_available(fixture, measured):
    from ovpasses.app.bench.run import bench, forms_that_apply
    from ovpasses.app.render.bench import bench_text

    source = FIXTURES / fixture
    estimates = {form: e.mib for (form, _), e in forms_that_apply(source, "core", [200]).estimates.items()}
    fits, needs = max(estimates[f] for f in measured), min(e for f, e in estimates.items() if f not in measured)
    assert fits < needs
    limit = (fits + needs) / 2   # as if this machine had that much available
    report = bench(source, "core", [200], steps=2, available=lambda: limit)
    assert {r.form for r in report.rows} == set(estimates) and report.measured
    for r in report.rows:
        if r.form in measured:
            assert r.skipped is None and r.error is None and r.tokens_equal is True and r.peak_rss_mib > 0, r
        else:
            assert r.skipped == f"needs about {estimates[r.form]:,.0f} MiB, {limit:,.0f} MiB available", r
            assert r.peak_rss_mib is None and r.tokens_equal is None and r.estimate_mib == round(estimates[r.form], 1)
    data = report.to_dict()
    assert all("skipped" in row and "estimate_mib" in row for row in data["rows"])
    assert "skipped: needs about" in bench_text(report)
