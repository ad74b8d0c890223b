"""How far a bounded IR's logits are from the unmodified IR's, against controls that bound nothing (issue 22).

    .venvs/dev/bin/python benchmarks/probes/sliding_window_exactness.py --model out/e2b-wide-w512 [--context 2048]
        [--chunk 1000] [--steps 8]

Exact f32 config (:data:`ovpasses.precision.EXACT_CPU_CONFIG`). The unmodified IR prefilled in
``--chunk``-token chunks then ``--steps`` greedy steps is the base; each variant's logits over those steps
are compared with it: the same IR prefilled in half-size chunks, unshared (fused everywhere), every SDPA
decomposed (``ovpasses.app.check.side_by_side.decomposed_reference``: out of the fused kernel, nothing bounded) and bounded. A
bounded difference of the decomposed one's size is the cost of leaving the fused kernel, not of the bound.
Writes ``benchmarks/results/sliding_window_exactness-<model folder>-<context>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, model_parser, progress, stateful_feeder, write_record  # noqa: E402  (a module of benchmarks/)


def logits(model_dir: Path, variant: str, context: int, chunk: int, steps: int) -> np.ndarray:
    import openvino as ov

    import ovpasses
    from ovpasses.app.check.side_by_side import decomposed_reference
    from ovpasses.precision import EXACT_CPU_CONFIG
    core = ov.Core()
    model = core.read_model(model_dir / "openvino_model.xml")
    if variant == "bounded":
        ovpasses.rewrite(model, sliding_window="bounded")
    elif variant == "unshared":
        ovpasses.rewrite(model, kv_sharing="unshare")
    elif variant == "decomposed":
        model = decomposed_reference(model)
    request = core.compile_model(model, "CPU", EXACT_CPU_CONFIG).create_infer_request()
    request.reset_state()
    out = []
    config = json.loads((model_dir / "config.json").read_text())
    vocab = (config.get("text_config") or config).get("vocab_size") or 256
    prompt = np.random.default_rng(0).integers(4, min(vocab, 4000), context)
    feed = stateful_feeder(request)

    for begin in range(0, context, chunk):
        last = feed(prompt[begin:begin + chunk])
    for _ in range(steps):
        out.append(last)
        last = feed([int(np.argmax(last))])
    return np.array(out)


def main(argv=None) -> int:
    parser = model_parser(__doc__, 2048)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    progress("unmodified")
    base = logits(args.model, "unmodified", args.context, args.chunk, args.steps)
    rows = []
    for variant, chunk in (("unmodified", args.chunk // 2), ("unshared", args.chunk), ("decomposed", args.chunk),
                           ("bounded", args.chunk)):
        progress(f"{variant}, chunk {chunk}")
        other = logits(args.model, variant, args.context, chunk, args.steps)
        rows.append({"variant": variant, "chunk": chunk, "max_logit_diff": float(np.abs(other - base).max()),
                     "tokens_equal": bool((other.argmax(-1) == base.argmax(-1)).all())})
    print(markdown_table(list(rows[0]), [list(r.values()) for r in rows]))
    write_record(f"sliding_window_exactness-{args.model.name}-{args.context}", rows, model=str(args.model),
                 context=args.context, chunk=args.chunk, steps=args.steps, config="EXACT_CPU_CONFIG",
                 max_abs_logit=float(np.abs(base).max()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
