"""benchmarks/probes/plugin_memory_groups.py: the replay of the CPU plugin's grouping on synthetic boxes, and a run on tiny8."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "probes"))

import plugin_memory_groups as pmg  # noqa: E402


def test_a_group_takes_the_first_box_that_fits_in_time_whatever_its_size():
    # two large boxes never alive together, a small one in between: the small one takes the first large box's
    # group, the second large box another group, and both groups grow to 100 where 101 are ever alive at once
    boxes = [(0, 1, 100), (0, 3, 1), (2, 5, 1), (4, 5, 100)]
    assert pmg.grouped(boxes) == [100, 100] and pmg.need(boxes) == 101
    # without the small boxes the second large box reuses the first's group
    assert pmg.grouped([(0, 1, 100), (4, 5, 100)]) == [100] and pmg.need([(0, 1, 100), (4, 5, 100)]) == 100
    # boxes that touch overlap (an input is read at the index where the output is made)
    assert pmg.grouped([(0, 2, 10), (2, 4, 10)]) == [10, 10]
    assert pmg.grouped([(0, 2, 10), (3, 4, 10)]) == [10]


@pytest.mark.slow   # a probe's run, as the other probes' (tests/test_benchmarks.py); its parser's tests stay
def test_runs_on_tiny8(tmp_path):
    model = ROOT / "tests" / "fixtures" / "gemma4" / "tiny8"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "plugin_memory_groups.py"), "--model", str(model),
                           "--context", "64", "--form", "unmodified", "--form", "trimmable"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, OVPASSES_BENCH_RESULTS=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| " in proc.stdout, "prints a markdown table"
    rows = json.loads((tmp_path / "plugin_memory_groups-tiny8-64.json").read_text())["rows"]
    assert [row["form"] for row in rows] == ["unmodified", "trimmable"]
    for row in rows:
        assert row["boxes"] > 100 and row["peak_rss_mib"] > 0
        assert 0 < row["need_bytes"] <= row["grouped_bytes"], row
        assert row["groups"] >= 2
