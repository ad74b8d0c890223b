"""benchmarks/probes/plugin_memory_blocks.py: the parser of its system-call trace, and a run on tiny8 where strace exists."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "probes"))

import plugin_memory_blocks as pmb  # noqa: E402

MIB = 1 << 20


def _mmap(size, addr):
    return f"7 mmap(NULL, {size}, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = {hex(addr)}"


def test_parse_follows_blocks_between_the_markers():
    lines = [
        _mmap(64 * MIB, 0x1000),                                  # before the request: not counted
        f'7 access("{pmb.START}", F_OK) = -1 ENOENT (No such file or directory)',
        _mmap(8 * MIB, 0x2000),
        _mmap(512 * 1024, 0x3000),                                # under 1 MiB: not a block
        _mmap(16 * MIB, 0x4000),
        "7 munmap(0x2000, 8388608) = 0",                          # a group grown: the old block goes
        _mmap(32 * MIB, 0x5000),
        f"7 mremap(0x4000, {16 * MIB}, {20 * MIB}, MREMAP_MAYMOVE) = 0x6000",
        "7 munmap(0x1000, 67108864) = 0",                         # made before the start: ignored
        "7 munmap(0x6000, 20971520) = 0",
        f'7 access("{pmb.END}", F_OK) = -1 ENOENT (No such file or directory)',
        _mmap(128 * MIB, 0x7000),                                 # after the request: not counted
    ]
    blocks = pmb.parse_strace(lines)
    assert blocks.peak == 52 * MIB
    assert blocks.sizes == (32 * MIB, 20 * MIB)


def test_a_trace_without_both_markers_is_refused():
    """No figure from a trace that never saw the request (strace not following the child, a marker renamed)."""
    with pytest.raises(ValueError, match="start marker"):
        pmb.parse_strace([_mmap(64 * MIB, 0x1000)])
    with pytest.raises(ValueError, match="end marker"):
        pmb.parse_strace([f'7 access("{pmb.START}", F_OK) = -1 ENOENT', _mmap(64 * MIB, 0x1000)])


def test_difference_counts_sizes_both_ways():
    a = pmb.Blocks(0, (64 * MIB, 32 * MIB, 32 * MIB, 8 * MIB))
    b = pmb.Blocks(0, (64 * MIB, 64 * MIB, 32 * MIB, 2 * MIB))
    assert pmb.difference(a, b) == ([64, 2], [32, 8])


@pytest.mark.slow   # a probe's run, as the other probes' (tests/test_benchmarks.py); its parser's tests stay
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (Debian package strace)")
def test_runs_on_tiny8():
    model = ROOT / "tests" / "fixtures" / "gemma4" / "tiny8"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "plugin_memory_blocks.py"), "--model", str(model),
                           "--context", "64", "--form", "unmodified", "--form", "trimmable"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [row["form"] for row in rows] == ["unmodified", "trimmable"]
    assert all(row["peak_rss_mib"] > 0 and row["blocks"] == len(row["sizes_mib"]) for row in rows)
    assert "more_than_first_mib" in rows[1] and "more_than_first_mib" not in rows[0]
