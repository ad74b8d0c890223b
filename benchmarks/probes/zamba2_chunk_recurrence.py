"""Does a Zamba2 IR carry its Mamba-2 state from chunk to chunk of one call, and does one axis mend it? (2026-12-07
evening record; tests/fixtures/HYBRIDS.md)

optimum-intel 2.2.0's patched Zamba2 mixer runs a call of several tokens through transformers' chunked path, whose
inter-chunk recurrence ``(decay[b,h,z,c,1,1] * states[b,h,1,c,d,n]).sum(z)`` sums over the target chunk instead of
the source chunk; a one-token call takes a recurrent branch, which is right. Per form of the IR (``as exported``;
``axis mended``: that ``ReduceSum``'s axis 2 made 3, the same output shape), the probe feeds one prompt whole and
one token a call, under ``ovpasses.precision.EXACT_CPU_CONFIG``, and prints the logits' largest difference on the
first chunk's positions and the smallest and largest after it, the greedy tokens after each feeding, and the
median decode step::

    python benchmarks/probes/zamba2_chunk_recurrence.py --model tests/fixtures/zamba2/tiny
    python benchmarks/probes/zamba2_chunk_recurrence.py --model EXPORT --prompt 40 --steps 16

Writes ``benchmarks/results/zamba2_chunk_recurrence-MODEL.json``. The mend here is the probe's own, not a pass of the
library (notes/backlog.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset13 as ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, write_record  # noqa: E402  (a module of benchmarks/)

from ovpasses.precision import EXACT_CPU_CONFIG  # noqa: E402


def mend(model: ov.Model) -> int:
    """Make each inter-chunk recurrence sum over the source chunk: a ReduceSum of axis [2] on a rank-6 Multiply whose
    results only a Transpose reads gets axis [3]. Returns how many it changed."""
    changed = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ReduceSum":
            continue
        source, axes = (node.input_value(i).get_node() for i in (0, 1))
        if source.get_type_name() != "Multiply" or source.get_output_partial_shape(0).rank.get_length() != 6:
            continue
        if axes.get_type_name() != "Constant" or axes.get_data().tolist() != [2]:
            continue
        if not all(t.get_node().get_type_name() == "Transpose" for t in node.output(0).get_target_inputs()):
            continue
        node.input(1).replace_source_output(ops.constant(np.array([3], np.int64)).output(0))
        changed += 1
    model.validate_nodes_and_infer_types()
    return changed


def run(compiled: ov.CompiledModel, calls: list[list[int]], steps: int) -> tuple[np.ndarray, list[int], list[float]]:
    """The prompt's logits fed as ``calls``, then ``steps`` greedy tokens one a call with their step times."""
    request = compiled.create_infer_request()
    request.reset_state()
    past, logits = 0, []

    def feed(ids: list[int]) -> np.ndarray:
        nonlocal past
        past += len(ids)
        request.infer({"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, past), np.int64),
                       "beam_idx": np.zeros(1, np.int32)})
        return request.get_output_tensor(0).data[0].copy()

    for ids in calls:
        logits.append(feed(ids))
    tokens, times = [], []
    for _ in range(steps):
        tokens.append(int(logits[-1][-1].argmax()))
        start = time.perf_counter()
        logits.append(feed([tokens[-1]]))
        times.append(time.perf_counter() - start)
    return np.concatenate(logits[:len(calls)]), tokens, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a Zamba2 export folder (optimum-cli)")
    parser.add_argument("--prompt", type=int, default=0,
                        help="prompt tokens (seeded); 0: reference.json's long prompt where the folder has one")
    parser.add_argument("--steps", type=int, default=8, help="greedy decode steps after each feeding")
    args = parser.parse_args(argv)
    config = json.loads((args.model / "config.json").read_text())
    chunk, vocab = config["chunk_size"], config["vocab_size"]
    reference = args.model / "reference.json"
    if args.prompt == 0 and reference.exists():
        prompt = json.loads(reference.read_text())["long_prompt"]["prompt_ids"]
    else:
        prompt = np.random.default_rng(0).integers(4, vocab, args.prompt or 3 * chunk).tolist()
    if len(prompt) <= chunk:
        parser.error(f"a prompt of {len(prompt)} tokens fits in one chunk ({chunk}): give --prompt over {chunk}")
    core = ov.Core()
    rows = []
    for form in ("as exported", "axis mended"):
        model = core.read_model(args.model / "openvino_model.xml")
        mended = mend(model) if form == "axis mended" else 0
        compiled = core.compile_model(model, "CPU", EXACT_CPU_CONFIG)
        whole, whole_tokens, times = run(compiled, [prompt], args.steps)
        single, single_tokens, _ = run(compiled, [[t] for t in prompt], args.steps)
        error = np.abs(whole - single).max(axis=1)
        rows.append({"form": form, "recurrences_mended": mended, "prompt": len(prompt), "chunk": chunk,
                     "first_chunk_max": float(error[:chunk].max()), "after_min": float(error[chunk:].min()),
                     "after_max": float(error[chunk:].max()), "tokens_whole": whole_tokens,
                     "tokens_one_a_call": single_tokens, "tokens_equal": whole_tokens == single_tokens,
                     "decode_ms": round(1000 * statistics.median(times), 2)})
    print(markdown_table(["form", "mended", "first chunk max", "after: min", "after: max", "tokens equal", "decode ms"],
                         [[r["form"], r["recurrences_mended"], f"{r['first_chunk_max']:.2e}", f"{r['after_min']:.2e}",
                           f"{r['after_max']:.2e}", r["tokens_equal"], r["decode_ms"]] for r in rows]))
    print(f"record: {write_record(f'zamba2_chunk_recurrence-{args.model.name}', rows, model=str(args.model))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
