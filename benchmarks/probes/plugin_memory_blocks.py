"""The CPU plugin's memory blocks during one request, read from the system calls (issue 32): which large blocks a
form holds at its peak that another does not. Diagnostic, not a benchmark; needs ``strace`` (Debian: ``strace``).

    .venvs/dev/bin/python benchmarks/probes/plugin_memory_blocks.py --model out/command-r7b-widths --context 8192 \
        --form unmodified --form trimmable

Why: with dynamic shapes the plugin gives each group of its tensors one block that grows to the group's largest
member (``memory_control.cpp``, runtime notes in ``docs/runtimes.md``), so two forms that compute the same
tensors can hold different sums, and the peak RSS alone does not say which blocks differ. Each form runs in a
fresh process under ``strace -f -e trace=mmap,munmap,mremap,access``, with glibc's mmap threshold at 1 MiB (as the
trimmer and the prefill probe set it), so that every block of 1 MiB or more is an anonymous ``mmap`` of its own and
a grown block is a new mapping with the old one unmapped. Between two markers around ``infer`` (``access`` of a path
that does not exist) the mappings of 1 MiB or more are followed; the output is, per form, their largest sum and the
sizes alive at that moment, and per form after the first, the sizes it holds there that the first does not and the
other way round. The peak RSS of the same process is printed beside it (it adds the weights, the small blocks and
the pages touched before the request).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

START, END = "/ovpasses-request-start", "/ovpasses-request-end"
MIN_BLOCK = 1 << 20
_MMAP = re.compile(r"mmap\(NULL, (\d+), [^)]*MAP_ANONYMOUS[^)]*\) = (0x[0-9a-f]+)")
_MUNMAP = re.compile(r"munmap\((0x[0-9a-f]+), (\d+)\)\s+= 0")
_MREMAP = re.compile(r"mremap\((0x[0-9a-f]+), (\d+), (\d+), [^)]*\) = (0x[0-9a-f]+)")


@dataclass(frozen=True)
class Blocks:
    """The largest sum of live anonymous mappings of at least ``MIN_BLOCK`` bytes between the markers, and the
    sizes (bytes, largest first) alive when it was reached."""
    peak: int
    sizes: tuple[int, ...]


def parse_strace(lines) -> Blocks:
    """Follow ``mmap`` / ``munmap`` / ``mremap`` of anonymous mappings of ``MIN_BLOCK`` bytes or more between the
    ``access`` markers ``START`` and ``END`` (mappings made before the start are not counted). :class:`ValueError`
    when the trace lacks either marker: then nothing was followed, and no figure may be read from it."""
    live: dict[int, int] = {}
    current = peak = 0
    at_peak: tuple[int, ...] = ()
    started = ended = False
    for line in lines:
        if START in line:
            started = True
            continue
        if not started:
            continue
        if END in line:
            ended = True
            break
        if (m := _MMAP.search(line)) and int(m.group(1)) >= MIN_BLOCK:
            live[int(m.group(2), 16)] = int(m.group(1))
            current += int(m.group(1))
        elif (m := _MUNMAP.search(line)) and int(m.group(1), 16) in live:
            current -= live.pop(int(m.group(1), 16))
        elif m := _MREMAP.search(line):
            if int(m.group(1), 16) in live:
                current -= live.pop(int(m.group(1), 16))
            if int(m.group(3)) >= MIN_BLOCK:
                live[int(m.group(4), 16)] = int(m.group(3))
                current += int(m.group(3))
        if current > peak:
            peak, at_peak = current, tuple(sorted(live.values(), reverse=True))
    if not (started and ended):
        raise ValueError(f"the trace has no {'end' if started else 'start'} marker of the request: no block was "
                         "followed")
    return Blocks(peak, at_peak)


def difference(a: Blocks, b: Blocks) -> tuple[list[int], list[int]]:
    """The sizes (MiB, rounded down) at ``b``'s peak that ``a``'s lacks, and those ``a`` holds that ``b`` lacks."""
    ca = collections.Counter(s >> 20 for s in a.sizes)
    cb = collections.Counter(s >> 20 for s in b.sizes)
    return sorted((cb - ca).elements(), reverse=True), sorted((ca - cb).elements(), reverse=True)


def _child(args) -> None:
    import numpy as np
    import openvino as ov

    import ovpasses
    from ovpasses.features.sliding_window.trim import _fix_mmap_threshold

    core = ov.Core()
    model = core.read_model(f"{args.model}/openvino_model.xml")
    if args.child != "unmodified":
        ovpasses.rewrite(model, sliding_window="trimmable",
                         first_prompt="blocked" if args.child == "blocked" else "fused")
    _fix_mmap_threshold()
    request = core.compile_model(model, "CPU").create_infer_request()
    n = args.context
    inputs = {"input_ids": np.random.default_rng(0).integers(4, 2000, n)[None].astype(np.int64),
              "attention_mask": np.ones((1, n), np.int64), "position_ids": np.arange(n, dtype=np.int64)[None],
              "beam_idx": np.zeros(1, np.int32)}
    os.access(START, os.F_OK)
    request.infer(inputs)
    os.access(END, os.F_OK)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    print(json.dumps({"peak_rss_mib": hwm >> 10}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--context", type=int, required=True)
    parser.add_argument("--form", action="append", choices=("unmodified", "trimmable", "blocked"),
                        help="repeat to compare (the first is the reference)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    forms = args.form or ["unmodified", "trimmable"]
    first = None
    for form in forms:
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as trace:
            done = subprocess.run(["strace", "-f", "-e", "trace=mmap,munmap,mremap,access", "-o", trace.name,
                                   sys.executable, __file__, "--model", args.model, "--context", str(args.context),
                                   "--child", form], capture_output=True, text=True, check=True)
            blocks = parse_strace(trace)
        rss = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mib"]
        line = {"form": form, "context": args.context, "peak_rss_mib": rss, "blocks_peak_mib": blocks.peak >> 20,
                "blocks": len(blocks.sizes), "sizes_mib": [s >> 20 for s in blocks.sizes]}
        if first is None:
            first = blocks
        else:
            more, fewer = difference(first, blocks)
            line.update(more_than_first_mib=more, fewer_than_first_mib=fewer)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
