#!/usr/bin/env python3
"""Accuracy of a deep stateful stack against a float64 NumPy reference: the unmodified model (the
CPU plugin's fused stateful SDPA kernels), the plugin's own SDPA decomposition, and ovpasses'
(scale after MatMul(Q, K^T)).

    python benchmarks/accuracy.py                          # under the installed runtime
    .venvs/ov-2026.0.0/bin/python benchmarks/accuracy.py   # under 2026.0

The stack comes from :func:`testkit.graphs.build_stack`: ``--layers`` attention blocks (16)
with residual connections, each owning an f32 KV cache read through Gather(beam_idx) (the form the
plugin fuses), a float attention mask, pre-scaled Q (``Q * s`` into an SDPA whose scale is ``s``), hidden 512 (8 heads of 64).
One prefill then decode steps, states carried; the reference is
:func:`~testkit.graphs.stack_reference` (float64, from the operation specifications).
Modes:

* ``unmodified``: the IR as is; the plugin fuses every SDPA into its stateful kernel.
* ``plugin decomposition``: every SDPA behind ovpasses' no-op Reshape barrier, so the plugin does not
  fuse it and applies its own ScaledDotProductAttentionDecomposition (CommonOptimizations).
* ``ovpasses decomposition``: every SDPA decomposed by ScaledDotProductAttentionDecomposition.

Each with the plugin's default snippets (MHA subgraph kernels) and with ``SNIPPETS_MODE=DISABLE``, at
f32 inference precision with an f32 KV cache (``--precision default``: the plugin's defaults). Writes
``benchmarks/results/accuracy-<runtime>[-default].json``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from common import markdown_table, openvino_version, progress, write_record

import openvino as ov  # noqa: E402
from openvino.passes import Manager  # noqa: E402

from ovpasses import DisableStatefulSDPAFusion, ScaledDotProductAttentionDecomposition  # noqa: E402
from ovpasses.app.check import count_fused_sdpa, count_layer_type  # noqa: E402
from ovpasses.precision import EXACT_CPU_CONFIG  # noqa: E402
from testkit.graphs import StackSpec, build_stack, run_stack, stack_reference, stack_steps  # noqa: E402

MODES = {
    "unmodified": None,
    "plugin decomposition": lambda: DisableStatefulSDPAFusion(lambda node: True),
    "ovpasses decomposition": lambda: ScaledDotProductAttentionDecomposition(),
}
SNIPPETS = {"default": {}, "DISABLE": {"SNIPPETS_MODE": "DISABLE"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--scale", type=float, default=0.125, help="the SDPA scale s (Q arrives as Q * s)")
    parser.add_argument("--prefill", type=int, default=64)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--precision", choices=["f32", "default"], default="f32",
                        help="f32: f32 inference and KV cache; default: the plugin's defaults (bf16 on CPUs "
                             "with avx512_bf16 or AMX, f16 KV cache)")
    args = parser.parse_args(argv)

    runtime = openvino_version()
    core = ov.Core()
    rows = []
    for seed in args.seeds:
        spec = StackSpec(k_source=tuple(range(args.layers)), heads=args.heads, kv_heads=args.heads,
                         head_dim=args.head_dim, scale="prescaled", scale_value=args.scale, mask="float", seed=seed)
        steps = stack_steps(spec, args.prefill, args.decode, seed=seed + 1)
        expected = stack_reference(spec, steps)
        magnitude = max(float(np.abs(e).max()) for e in expected)
        for mode, make_pass in MODES.items():
            model = build_stack(spec)
            if make_pass:
                manager = Manager()
                manager.register_pass(make_pass())
                manager.run_passes(model)
            for snippets, extra in SNIPPETS.items():
                base = EXACT_CPU_CONFIG if args.precision == "f32" else {}
                compiled = core.compile_model(model, "CPU", {**base, **extra})
                got = run_stack(compiled, spec, steps)
                errors = [float(np.abs(np.asarray(g, np.float64) - e).max()) for g, e in zip(got, expected)]
                row = {"seed": seed, "mode": mode, "snippets": snippets, "fused_sdpa": count_fused_sdpa(compiled),
                       "mha_subgraphs": count_layer_type(compiled, "Subgraph"),
                       "max_abs_error": max(errors), "prefill_max_abs_error": errors[0],
                       "decode_max_abs_error": max(errors[1:]) if len(errors) > 1 else None,
                       "reference_max_abs": magnitude}
                rows.append(row)
                progress(f"  seed {seed} {mode} snippets={snippets}: {row['max_abs_error']:.3e}")

    print(f"openvino {runtime}, {args.precision} precision; {args.layers} blocks, hidden {args.heads * args.head_dim}, pre-scaled Q (s={args.scale}), "
          f"prefill {args.prefill} + {args.decode} decode steps; max |out - float64 reference| over all steps, "
          f"worst of seeds {args.seeds}\n")
    table = []
    for mode in MODES:
        for snippets in SNIPPETS:
            group = [r for r in rows if r["mode"] == mode and r["snippets"] == snippets]
            worst = max(group, key=lambda r: r["max_abs_error"])
            table.append([mode, snippets, worst["fused_sdpa"], worst["mha_subgraphs"],
                          f"{worst['prefill_max_abs_error']:.2e}", f"{max(r['decode_max_abs_error'] for r in group):.2e}",
                          f"{worst['max_abs_error']:.2e}", f"{worst['reference_max_abs']:.1f}"])
    print(markdown_table(["mode", "snippets", "fused SDPA", "Subgraph nodes", "prefill err", "decode err",
                          "max err", "max abs reference"], table))
    name = f"accuracy-{runtime}" + ("" if args.precision == "f32" else f"-{args.precision}")
    target = write_record(name, rows, precision=args.precision, layers=args.layers, hidden=args.heads * args.head_dim,
                          scale=args.scale, prefill=args.prefill, decode=args.decode)
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
