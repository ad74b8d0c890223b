"""The hybrid families (tests/fixtures/HYBRIDS.md) through every rewrite mode on the installed runtime: per
family and mode, whether ``ovpass rewrite`` ran and changed the model, the fused SDPA kernels of the original and
the rewritten model, and the rewritten model's greedy tokens through ov.Core (the long prompt fed whole and in
chunks of 5) against the original's and transformers'. ``EXACT_CPU_CONFIG``; one process per runtime::

    .venvs/dev/bin/python benchmarks/hybrid_families.py            # or .venvs/ov-2026.0.0/bin/python ...
    .venvs/dev/bin/python benchmarks/hybrid_families.py --families lfm2/tiny4 --modes default,trimmable

Prints a markdown table and writes ``benchmarks/results/hybrid_families-<openvino>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys

from common import ROOT, write_record  # sibling module; puts the checkout on sys.path

import openvino as ov  # noqa: E402

import ovpasses  # noqa: E402
from ovpasses.app.check import count_fused_sdpa  # noqa: E402
from ovpasses.precision import EXACT_CPU_CONFIG  # noqa: E402
from testkit.greedy import greedy_generate  # noqa: E402

FAMILIES = ["qwen3_5/tiny4", "qwen3_next/tiny4", "lfm2/tiny4", "granite4/tiny4", "zamba2/tiny", "llama4/tiny4"]
MODES = {"default": {}, "unshare": {"kv_sharing": "unshare"}, "bounded": {"sliding_window": "bounded"},
         "trimmable": {"sliding_window": "trimmable"},
         "blocked": {"sliding_window": "trimmable", "first_prompt": "blocked"}, "paged-heads": {"paged_heads": "pad"},
         "runtime 2026.0": {"runtime": "2026.0"}, "runtime 2025.2": {"runtime": "2025.2"}}
CHUNK = 5


def decode(core: ov.Core, model: ov.Model, prompt: list[int], new: int, chunk: int | None) -> tuple[list[int], int]:
    compiled = core.compile_model(model, "CPU", EXACT_CPU_CONFIG)
    return greedy_generate(compiled, prompt, new, prefill_chunk=chunk), count_fused_sdpa(compiled)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=FAMILIES)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown modes {unknown}; known: {', '.join(MODES)}")
    core = ov.Core()
    rows = []
    for family in args.families:
        folder = ROOT / "tests" / "fixtures" / family
        ref = json.loads((folder / "reference.json").read_text())["long_prompt"]
        prompt, new = ref["prompt_ids"], len(ref["generated_ids"])
        original = core.read_model(folder / "openvino_model.xml")
        base = {chunk: decode(core, original, prompt, new, chunk) for chunk in (None, CHUNK)}
        for mode in modes:
            kwargs = MODES[mode]
            model = original.clone()
            row = {"family": family, "mode": mode}
            try:
                summary = ovpasses.rewrite(model, **kwargs)
            except ovpasses.OvpassesError as exc:
                rows.append({**row, "error": str(exc)})
                continue
            got = {chunk: decode(core, model, prompt, new, chunk) for chunk in (None, CHUNK)}
            rows.append({**row, "changed": summary.changed, "states": len(summary.analysis.states),
                         "caches": len(summary.analysis.caches),
                         "fused_original": base[None][1], "fused_rewritten": got[None][1],
                         "equal_original_whole": got[None][0] == base[None][0],
                         "equal_original_chunked": got[CHUNK][0] == base[CHUNK][0],
                         "equal_transformers_whole": got[None][0] == ref["generated_ids"],
                         "equal_transformers_chunked": got[CHUNK][0] == ref["generated_ids"]})
    version = ov.get_version().split("-")[0]
    print(f"openvino {version}, CPU, EXACT_CPU_CONFIG; tokens: the long prompt (24) + 32, whole / chunks of {CHUNK}\n")
    print("| family | mode | changed | caches / states | fused original -> rewritten | = original (whole, chunked) "
          "| = transformers (whole, chunked) |")
    print("|---|---|---|---|---|---|---|")
    yes = {True: "yes", False: "**no**"}
    for r in rows:
        if "error" in r:
            print(f"| {r['family']} | {r['mode']} | refused: {r['error']} | | | | |")
            continue
        print(f"| {r['family']} | {r['mode']} | {'yes' if r['changed'] else 'no'} | {r['caches']} / {r['states']} | "
              f"{r['fused_original']} -> {r['fused_rewritten']} | {yes[r['equal_original_whole']]}, "
              f"{yes[r['equal_original_chunked']]} | {yes[r['equal_transformers_whole']]}, "
              f"{yes[r['equal_transformers_chunked']]} |")
    write_record(f"hybrid_families-{version}", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
