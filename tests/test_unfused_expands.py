"""The GQA expand of every SDPA the plugin does not fuse (UnfusedSDPAExpandRewrite), in every mode.

Structure: the SDPAs the plan expects unfused (Gemma 4's shared layers) read a one-head cache without the expand
(e2b35) or through one numpy Broadcast (tiny8, two KV heads); the fused ones keep theirs and stay fused.
Numbers: the logits and greedy tokens are the model's without the rule (exact config). The affected runtime runs
the same tests through a worker (``test_the_affected_runtime_takes_the_rule``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import ovpasses
from ovpasses.app.check import count_fused_sdpa, fused_sdpa_names
from ovpasses.passes.gqa_expand import gqa_expand, rebuilt
from ovpasses.plan.runtimes import FIRST_FIXED, installed_version
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.matrix import worker_env

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gemma4"
TINY8, E2B35 = FIXTURES / "tiny8", FIXTURES / "e2b35"
EXPAND_RULE = "UnfusedSDPAExpandRewrite"
# the runtimes a worker runs this module on, where their venvs exist (bash tools/venv.sh ov VERSION)
OTHER_RUNTIMES = ("2025.2.0", "2025.4.1", "2026.0.0")


def _rewrite(folder: Path, sliding_window: str, with_rule: bool = True):
    model = ov.Core().read_model(folder / "openvino_model.xml")
    passes = None if with_rule else [p for p in ovpasses.pipeline.PIPELINE_PASSES if p != EXPAND_RULE]
    summary = ovpasses.rewrite(model, sliding_window=sliding_window, passes=passes)
    return model, summary


def _greedy(compiled: ov.CompiledModel, prompt: list[int], chunk: int, steps: int) -> list[int]:
    request = compiled.create_infer_request()
    past = 0
    logits = None
    for begin in range(0, len(prompt), chunk):
        ids = prompt[begin:begin + chunk]
        request.infer({"input_ids": np.asarray(ids, np.int64)[None],
                       "attention_mask": np.ones((1, past + len(ids)), np.int64),
                       "position_ids": np.arange(past, past + len(ids), dtype=np.int64)[None],
                       "beam_idx": np.zeros(1, np.int32)})
        past += len(ids)
        logits = request.get_output_tensor(0).data[0, -1].copy()
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits)))
        request.infer({"input_ids": np.array([[tokens[-1]]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64),
                       "position_ids": np.array([[past]], np.int64), "beam_idx": np.zeros(1, np.int32)})
        past += 1
        logits = request.get_output_tensor(0).data[0, -1].copy()
    return tokens


# each fixture and each mode in the default run (e2b35 rewritten by default, tiny8 trimmable); the other two in the
# slow tier
EXPAND_CASES = [pytest.param(folder, heads, mode, id=f"{name}-{mode_id}",
                             marks=[pytest.mark.slow] if (folder == E2B35) == (mode == "trimmable") else [])
                for folder, heads, name in [(E2B35, 1, "e2b35-one-kv-head"), (TINY8, 2, "tiny8-two-kv-heads")]
                for mode, mode_id in [("full", "default-rewrite"), ("trimmable", "trimmable")]]


@pytest.mark.parametrize("folder, heads, sliding_window", EXPAND_CASES)
def test_unfused_sdpas_read_their_caches_without_the_exported_expand(folder, heads, sliding_window):
    """Every SDPA the plugin does not fuse (Gemma 4's shared layers) reads a one-head cache without its GQA expand,
    or through a numpy Broadcast (two KV heads); the SDPAs it fuses keep the exported expand and stay fused; the
    logits are the model's without the rule (exact config), the greedy tokens too."""
    loaded, summary = _rewrite(folder, sliding_window)
    applied = {r.node for r in summary.records if r.rule == EXPAND_RULE and r.status.value == "applied"}
    planned = {r.node for r in summary.records if r.rule == EXPAND_RULE}
    assert applied and applied == planned
    before, _ = _rewrite(folder, sliding_window, with_rule=False)
    compiled = ov.Core().compile_model(loaded, "CPU", EXACT_CPU_CONFIG)
    reference = ov.Core().compile_model(before, "CPU", EXACT_CPU_CONFIG)
    sdpas = [n for n in loaded.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"]
    assert count_fused_sdpa(compiled) == count_fused_sdpa(reference)
    fused = set(fused_sdpa_names(compiled, [n.get_friendly_name() for n in sdpas]))
    assert fused and not fused & applied
    for node in sdpas:
        expands = [gqa_expand(node, port) for port in (1, 2)]
        if node.get_friendly_name() in applied:
            if heads == 1:
                assert expands == [None, None] and node.get_input_partial_shape(1)[1].get_length() == 1
            else:
                assert all(e is not None and rebuilt(e) for e in expands)
        else:
            assert all(e is None or not rebuilt(e) for e in expands)
    prompt = [int(t) for t in np.random.default_rng(40).integers(4, 256, 40)]
    assert _greedy(compiled, prompt, 7, 12) == _greedy(reference, prompt, 7, 12)
    request, base = compiled.create_infer_request(), reference.create_infer_request()
    feed = {"input_ids": np.asarray(prompt, np.int64)[None], "attention_mask": np.ones((1, 40), np.int64),
            "position_ids": np.arange(40, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}
    request.infer(feed)
    base.infer(feed)
    np.testing.assert_allclose(request.get_output_tensor(0).data, base.get_output_tensor(0).data, rtol=0, atol=1e-5)


def test_nothing_is_planned_where_every_sdpa_is_fused():
    """With every cache unshared (``kv_sharing="unshare"``) each layer reads its own cache and the plugin fuses
    every SDPA: the rule plans nothing and the exported expands stay."""
    model = ov.Core().read_model(TINY8 / "openvino_model.xml")
    summary = ovpasses.rewrite(model, kv_sharing="unshare")
    assert not [r for r in summary.records if r.rule == EXPAND_RULE and r.status.value == "applied"]
    assert all(e is None or not rebuilt(e)
               for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"
               for e in (gqa_expand(n, 1), gqa_expand(n, 2)))


@pytest.mark.slow   # another runtime's rerun of a module: the slow tier (docs/testing.md)
@pytest.mark.skipif(installed_version() < FIRST_FIXED, reason="run from the newest runtime's suite")
@pytest.mark.parametrize("version", OTHER_RUNTIMES)
def test_the_older_runtimes_take_the_rule(version):
    """The tests above, run by another runtime's interpreter (the SDPA that broadcasts one KV head over the query
    heads, on the releases the default rewrite serves); skipped where its venv is absent."""
    python = ROOT / ".venvs" / f"ov-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"needs .venvs/ov-{version} (bash tools/venv.sh ov {version})")
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--runslow", __file__, "-k", "not older_runtimes"], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env=worker_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-500:]
