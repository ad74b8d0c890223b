"""Smoke runs of the benchmark scripts at toy sizes, so that docs/benchmarks.md's commands keep working: every
benchmark in benchmarks/ has one, the probes in benchmarks/probes/ that have one keep it, and every probe still
starts (its imports of benchmarks/ resolve from the subfolder) and is named in docs/benchmarks.md.

The records go to a temporary folder ($OVPASSES_BENCH_RESULTS), never over benchmarks/results.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
PROBES = BENCHMARKS / "probes"
TINY8 = ROOT / "tests" / "fixtures" / "gemma4" / "tiny8" / "openvino_model.xml"
A26 = ROOT / "tests" / "fixtures" / "gemma4" / "a26"
ZAMBA2 = ROOT / "tests" / "fixtures" / "zamba2" / "tiny"
EXPORT_PYTHON = ROOT / ".venvs" / "export" / "bin" / "python"

SLIDING_WINDOW = ["--model", str(TINY8.parent), "--context", "40", "--chunk", "16", "--decode", "2", "--rounds", "1"]
CASES = {
    "pipeline_speed": (["--layers", "4", "8", "--repeats", "1", "--compile-repeats", "1"], "pipeline_speed-"),
    "accuracy": (["--layers", "2", "--prefill", "4", "--decode", "1", "--seeds", "0"], "accuracy-"),
    "fused_kernels": (["--runtimes", "newest", "--fixtures", "tiny8"], "fused_kernels"),
    "decode_latency": (["--ir", str(TINY8), "--runtimes", "newest", "--rounds", "1", "--repeats", "1",
                        "--prefill", "8", "--decode", "2"], "decode_latency"),
    "unshare_decode": (["--ir", str(TINY8), "--runtimes", "newest", "--rounds", "1", "--contexts", "8",
                        "--decode", "2"], "unshare_decode"),
    # the 26B layout (two head sizes, as e2b35's): its compile is an eighth of e2b35's (the default fixture)
    "paged_heads": (["--runtimes", "newest", "--decode", "2", "--repeats", "1", "--fixture", str(A26)],
                    "paged_heads"),
    # every form in both configs (14 processes) in the slow tier; the default run the exact config's 7
    "sliding_window": ([*SLIDING_WINDOW, "--config", "default", "exact"], "sliding_window-tiny8-40"),
    "sliding_window exact": ([*SLIDING_WINDOW, "--config", "exact"], "sliding_window-tiny8-40"),
    "hybrid_families": (["--families", "qwen3_5/tiny4", "--modes", "default,trimmable"], "hybrid_families-"),
    # probes (benchmarks/probes/): their records stand; the runs (the slow tier's) keep them working
    "sliding_window_decode": (["--model", str(TINY8.parent), "--context", "64", "--decode", "4", "--every", "2",
                               "--rounds", "1"], "sliding_window_decode-tiny8-default"),
    "sliding_window_exactness": (["--model", str(TINY8.parent), "--context", "40", "--chunk", "16", "--steps", "2"],
                                 "sliding_window_exactness-tiny8-40"),
    "zamba2_chunk_recurrence": (["--model", str(ZAMBA2), "--steps", "2"], "zamba2_chunk_recurrence-tiny"),
    "sliding_window_expand_forms": (["--model", str(TINY8.parent), "--context", "40", "--chunk", "16", "--decode",
                                     "2", "--config", "exact"], "sliding_window_expand_forms-tiny8-40"),
    "sliding_window_profile": (["--model", str(TINY8.parent), "--context", "40", "--chunk", "16", "--steps", "2",
                                "--phase", "prefill"], "sliding_window_profile-tiny8-40"),
    # a prompt whose inference outweighs a step's: the steps' counters must be the steps' own
    "sliding_window_profile decode": (["--model", str(TINY8.parent), "--context", "3000", "--chunk", "3000",
                                       "--steps", "4", "--forms", "unmodified"], "sliding_window_profile-tiny8-3000"),
    # chunks of 19 > W = 16 in blocks of 4 (the last one padded), then 6 decode steps past W
    "sliding_window_banded": (["--model", str(TINY8.parent), "--context", "45", "--chunk", "19", "--block", "4",
                               "--decode", "6"], "sliding_window_banded-tiny8-45"),
}


# the benchmarks whose smoke run is not a CASE: export_widths.py runs under the export venv (below)
OWN_TEST = {"export_widths"}


def _script(name: str) -> Path:
    return next(path for path in (BENCHMARKS / f"{name}.py", PROBES / f"{name}.py") if path.exists())


def test_every_benchmark_has_a_smoke_run():
    kept = {path.stem for path in BENCHMARKS.glob("*.py")} - {"common"}
    assert kept <= {case.split()[0] for case in CASES} | OWN_TEST, "a benchmark without a smoke run"


def test_every_probe_starts_and_docs_name_the_record_it_made():
    """A probe is kept for its record: it still starts from benchmarks/probes/ (``--help``), and docs/benchmarks.md
    gives it a line in "Probes" that links the record it made (sdpa_kept.py's finding is a runtime note)."""
    probes = sorted(PROBES.glob("*.py"))
    assert probes
    section = (ROOT / "docs" / "benchmarks.md").read_text().split("\n## Probes\n", 1)[1].split("\n## ", 1)[0]
    for probe in probes:
        lines = [line for line in section.splitlines() if f"`{probe.name}`" in line]
        assert len(lines) == 1 and ("../benchmarks/records/" in lines[0] or "(runtimes.md#" in lines[0]), probe.name
        proc = subprocess.run([sys.executable, str(probe), "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, f"{probe.name}: {proc.stderr[-2000:]}"


@pytest.mark.skipif(not EXPORT_PYTHON.exists(), reason="needs .venvs/export (bash tools/venv.sh export)")
def test_export_widths_runs_tiny(tmp_path):
    """export_widths.py end to end at toy widths: Mistral's preset (every layer sliding), stateful, f32."""
    out = tmp_path / "mistral-tiny"
    proc = subprocess.run([str(EXPORT_PYTHON), str(BENCHMARKS / "export_widths.py"), "--preset", "mistral-7b",
                           "--tiny", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert (config["sliding_window"], config["hidden_size"], config["num_hidden_layers"]) == (16, 64, 4)
    import openvino as ov

    model = ov.Core().read_model(out / "openvino_model.xml")
    assert len(model.get_sinks()) == 2 * 4, "stateful: a key and a value cache per layer"


# the default run: each benchmark's tiny run (the sliding-window benchmark in one config); the slow tier: that one
# in both configs and the probes' runs (each probe starts in the default run, above)
SLOW_CASES = {"sliding_window"} | {case for case in CASES if _script(case.split()[0]).parent == PROBES}


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.slow] if case in SLOW_CASES else [])
                                  for case in CASES])
def test_benchmark_script_runs(case, tmp_path):
    args, record = CASES[case]
    script = case.split()[0]
    env = dict(os.environ, OVPASSES_BENCH_RESULTS=str(tmp_path))
    proc = subprocess.run([sys.executable, str(_script(script)), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| " in proc.stdout, "prints a markdown table"
    written = sorted(tmp_path.glob(f"{record}*.json"))
    assert written, f"no {record}*.json in {list(tmp_path.iterdir())}"
    data = json.loads(written[0].read_text())
    assert data["rows"] and data["machine"]["logical_cores"] and data["command"] and data["openvino"]
    if script == "pipeline_speed":
        assert list(tmp_path.glob("*.png"))
    if script == "fused_kernels":
        fused = {row["mode"]: row.get("fused_sdpa") for row in data["rows"]}
        assert fused == {"unmodified": 2, "rewritten": 2, "decomposed": 0}
    if script == "unshare_decode":
        rows = {row["mode"]: row for row in data["rows"]}
        assert (rows["keep"]["fused_sdpa"], rows["unshare"]["fused_sdpa"]) == (2, 8)
        assert rows["unshare"]["cache_bytes_per_token"] > rows["keep"]["cache_bytes_per_token"]
        assert rows["unshare"]["ratio_to_keep"] > 0 and rows["unshare"]["peak_rss_mib"] > 0
    if script == "paged_heads":
        rows = {row["row"]: row for row in data["rows"]}
        assert all(row["status"] == "ok" and row["tokens_match"] and row["decode_ms_per_token"] > 0 for row in rows.values())
        assert rows["paged-padded"]["kv_bytes_per_token"] > rows["paged"]["kv_bytes_per_token"]
        assert rows["stateful-padded"]["kv_bytes_per_token"] == rows["paged-padded"]["kv_bytes_per_token"]
    if script == "zamba2_chunk_recurrence":   # the fixture's 3 chunks: the first alike, the others off until mended
        exported, mended = data["rows"]
        assert exported["recurrences_mended"] == 0 and mended["recurrences_mended"] == 4
        assert exported["first_chunk_max"] < 1e-5 and exported["after_min"] > 2e-4
        assert mended["after_max"] < 1e-5 and mended["tokens_equal"]
    if script == "sliding_window":   # each form measured in a process of its own, every config asked, every form
        configs = args[args.index("--config") + 1:]
        assert {(row["config"], row["form"]) for row in data["rows"]} == {
            (c, f) for c in configs for f in ("unmodified", "rewritten", "bounded", "trimmable", "unshared",
                                              "unshared+bounded", "unshared+trimmable")}
        exact = {row["form"]: row for row in data["rows"] if row["config"] == "exact"}
        # the default rewrite keeps the fused layers and the unmodified tokens
        assert exact["rewritten"]["fused_sdpa"] == exact["unmodified"]["fused_sdpa"] == 2
        assert exact["rewritten"]["tokens_equal_unmodified"]
        assert exact["trimmable"]["fused_sdpa"] == 2 and exact["unshared+trimmable"]["fused_sdpa"] == 8
        assert exact["trimmable"]["tokens_equal_unmodified"] and exact["trimmable"]["trims"] > 0
        assert all(row["process_peak_rss_mib"] >= row["peak_rss_rise_mib"] > 0 for row in data["rows"])
        held = {(row["config"], row["form"]): row["kv_held_bytes"] for row in data["rows"]}
        # the exact config holds every cache in f32: tiny8's 4 fused caches (2 x 16) once, the shared ones
        # (layer 2's 2 x 16, layer 3's 2 x 32) as plain states twice, at 40 positions
        assert held[("exact", "unmodified")] == 40 * 4 * (4 * 32 + 2 * 2 * 32 + 2 * 2 * 64)
        assert all(held[(c, "bounded")] < held[(c, "unmodified")] for c in configs)
        assert {p["held"]["key"] for p in data["compiled_precision"]["exact"].values()} == {"f32"}
    if script == "hybrid_families":   # Qwen3.5 in both modes: its fused kernel kept, the tokens unchanged
        assert [row["mode"] for row in data["rows"]] == ["default", "trimmable"]
        assert all(row["fused_rewritten"] == row["fused_original"] == 1 for row in data["rows"]), data["rows"]
        assert all(row[key] for row in data["rows"] for key in row if key.startswith("equal_")), data["rows"]
    if script == "sliding_window_decode":   # states set, not prefilled: the trimmable form trims and stays fused
        rows = {row["form"]: row for row in data["rows"]}
        assert rows["unmodified"]["fused_sdpa"] == rows["trimmable"]["fused_sdpa"] == 2
        assert rows["trimmable"]["trim_ms"] > 0 and rows["unmodified"]["trim_ms"] is None
    if case == "sliding_window_profile decode":
        # the plugin's counters are means over every inference of the model: read as they stand, the
        # 3,000-token prompt's work would be in every step's figure (the script did so before 2026-11-27)
        row = data["rows"][0]
        assert row["phase"] == "decode" and row["steps"] == 4 and row["fused_sdpa"] == 2
        assert 0 < row["counted_ms_per_step"] <= 1.5 * row["step_ms_median"], row
    if case == "sliding_window_profile":   # the prefill's counters, per decoder layer (tiny8: 8 layers)
        row = data["rows"][0]
        assert row["phase"] == "prefill" and row["steps"] == 3 and row["wall_s"] > 0
        assert {str(n) for n in range(8)} <= set(row["by_layer_ms_per_step"])
        assert all(parts["other"] > 0 for layer, parts in row["by_layer_ms_per_step"].items() if layer != "-")
    if script == "sliding_window_banded":   # the banded form changes every bounded SDPA and no value
        assert [row["form"] for row in data["rows"]] == ["unmodified", "bounded", "banded"] and data["banded_sdpas"] == 6
        assert all(row["tokens_equal_reference"] and row["max_logit_diff"] < 1e-4 for row in data["rows"])
    if script == "sliding_window_expand_forms":   # tiny8 (2 KV heads): every form decodes the unmodified tokens
        assert [row["form"] for row in data["rows"]] == ["unmodified", "bounded-bidirectional", "bounded",
                                                         "bounded-grouped"]
        assert all(row["tokens_equal_unmodified"] for row in data["rows"])
