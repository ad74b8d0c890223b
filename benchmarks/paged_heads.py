#!/usr/bin/env python3
"""Decode latency and KV bytes per token: the stateful path against the paged path with ``--paged-heads pad``
(issue 23), on the E2B fixture or another export, through ov.Core on CPU, per runtime.

    python benchmarks/paged_heads.py                          # newest and 2026.0.0, tests/fixtures/gemma4/e2b35
    python benchmarks/paged_heads.py --fixture tests/fixtures/gemma4/a26     # the 26B/31B layout

Rows per runtime (each in its own process under the runtime's virtual environment):

* ``stateful``: ``ovpasses.rewrite`` (as by default), the stateful model, greedy;
* ``stateful-padded``: ``rewrite(paged_heads="pad")``, the stateful model: what the padding costs there;
* ``paged``: ``rewrite`` then openvino's PagedAttention conversion (what openvino_genai's continuous
  batching runs at load), fed one sequence by :class:`testkit.paged.PagedSequence`;
* ``paged-padded``: the same after ``rewrite(paged_heads="pad")``.

Each compiles with ``ovpasses.precision.EXACT_CPU_CONFIG`` (f32 inference and KV cache, so that the tokens
compare with transformers' and the cache bytes are the IR's), prefills the fixture's prompt, and decodes
``--decode`` tokens greedily; ``ms/token`` is the median decode step over ``--repeats`` rounds (wall
time); ``tokens`` whether the first 20 equal transformers' (reference.json). ``KV B/token`` is, stateful,
what the cache variables hold per token of context at batch 1 and, paged, what the PagedAttention cache
inputs hold per token (``Hkv x D x element size`` summed over ``key_cache.*`` / ``value_cache.*``; on
2026.0 the converter gives each KV-shared borrower caches of its own). The fixture is tiny (hidden 32):
the latencies are the per-step overhead of each path, not a large model's. Writes
``benchmarks/results/paged_heads.json`` (e2b35) or ``paged_heads-FIXTURE.json`` (another fixture).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, markdown_table, progress, write_record

sys.path.insert(0, str(ROOT / "tools"))
from runtime_matrix import run_worker, venv_python  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "gemma4" / "e2b35"
ROWS = {"stateful": ("keep", "stateful"), "stateful-padded": ("pad", "stateful"),
        "paged": ("keep", "paged"), "paged-padded": ("pad", "paged")}
RUNTIMES = ["newest", "2026.0.0"]


def worker(fixture: Path, row: str, decode: int, repeats: int) -> dict:
    """Runs in the runtime's own interpreter; prints one JSON line."""
    import numpy as np
    import openvino as ov

    import ovpasses
    from ovpasses._ov import infer   # start_async and wait: one inference thread hides a failed one from infer()
    from ovpasses.precision import EXACT_CPU_CONFIG
    from testkit.paged import PagedSequence, to_paged

    paged_heads, path = ROWS[row]
    reference = json.loads((fixture / "reference.json").read_text())
    prompt, expected = reference["prompt_ids"], reference["generated_ids"]
    result = {"runtime": ov.get_version().split("-")[0], "row": row}
    try:
        model = ov.Core().read_model(fixture / "openvino_model.xml")
        ovpasses.rewrite(model, paged_heads=paged_heads)
        if path == "stateful":
            result["kv_bytes_per_token"] = sum(
                v.get_info().data_type.size * v.get_info().data_shape[1].get_length()
                * v.get_info().data_shape[3].get_length() for v in model.get_variables())
            compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
        else:
            compiled = ov.Core().compile_model(to_paged(model), "CPU", EXACT_CPU_CONFIG)
        steps, tokens = [], []
        for _ in range(repeats):
            tokens, ids = [], list(prompt)
            if path == "stateful":
                request, past = compiled.create_infer_request(), 0

                def step(new: list[int]) -> np.ndarray:
                    nonlocal past
                    infer(request, {"input_ids": np.array([new]),
                                    "attention_mask": np.ones((1, past + len(new)), np.int64),
                                    "position_ids": np.arange(past, past + len(new))[None],
                                    "beam_idx": np.zeros(1, np.int32)})
                    past += len(new)
                    return request.get_output_tensor(0).data[0, -1]
            else:
                sequence = PagedSequence(compiled, blocks=-(-(len(prompt) + decode) // 16) + 1)
                result["kv_bytes_per_token"] = sum(c.dtype.itemsize * c.shape[1] * c.shape[3]
                                                   for c in sequence.caches.values())

                def step(new: list[int]) -> np.ndarray:
                    return sequence.feed(new)[-1]
            logits = step(ids)
            for _ in range(decode):
                tokens.append(int(np.argmax(logits)))
                start = time.perf_counter()
                logits = step([tokens[-1]])
                steps.append(time.perf_counter() - start)
        n = min(len(expected), len(tokens))
        result.update(status="ok", decode_ms_per_token=round(statistics.median(steps) * 1e3, 3),
                      decode_steps=len(steps), tokens_match=tokens[:n] == expected[:n], compared=n)
    except Exception as exc:  # noqa: BLE001 - a runtime that fails is a result
        result.update(status="failed", error=(str(exc).strip().splitlines() or [repr(exc)])[-1][:200])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", type=Path, default=FIXTURE)
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES, help="newest and/or VERSION (.venvs/ov-VERSION)")
    parser.add_argument("--decode", type=int, default=32, help="decode steps after the prompt")
    parser.add_argument("--repeats", type=int, default=3, help="prefill + decode rounds per process")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.fixture, args.worker, args.decode, args.repeats)), flush=True)
        return 0
    rows, table = [], []
    for runtime in args.runtimes:
        for row in ROWS:
            cmd = [str(venv_python(runtime, create=False)), str(Path(__file__).resolve()), "--worker", row,
                   "--fixture", str(args.fixture), "--decode", str(args.decode), "--repeats", str(args.repeats)]
            out = run_worker(cmd, args.timeout, {"runtime": runtime, "row": row})
            progress(f"  {runtime} {row}: {out}")
            rows.append(out)
            table.append([out.get("runtime", runtime), row, out.get("decode_ms_per_token", "-"),
                          out.get("kv_bytes_per_token", "-"),
                          {True: "right", False: "wrong"}.get(out.get("tokens_match"), out.get("status"))])
    print(markdown_table(["runtime", "path", "decode ms/token", "KV B/token", "tokens"], table))
    name = "paged_heads" if args.fixture.resolve() == FIXTURE else f"paged_heads-{args.fixture.name}"
    write_record(name, rows, fixture=str(args.fixture.relative_to(ROOT) if args.fixture.is_relative_to(ROOT)
                                                  else args.fixture), decode=args.decode, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
