"""A hybrid model's recurrent states (a conv state, a linear-attention state scanned in a Loop) are not KV caches.

The smallest graphs that showed the KV-sharing analysis reading a state as a cache, and the builder's hybrid
stacks (:class:`~testkit.graphs.StackSpec` with ``recurrent_layers``) against their float64 reference. The
properties over generated hybrid stacks are in tests/test_properties.py (section 9).

Before 2332c9a the walk from a ReadValue crossed every operation, so a state whose block output joins the
hidden states reached the K/V projections, and so the K/V ports, of every later attention layer::

    ReadValue(conv) -> Gather -> Concat(past, x) -> GroupConvolution -> ... -> MatMul -> + x
    x -> MatMul(k_proj) -> Concat(past_k, new) -> SDPA (port 1)           (of layer 0, and of layer 1)
"""

from __future__ import annotations

import numpy as np
import pytest

from ovpasses import analyze_kv_sharing
from ovpasses.precision import EXACT_CPU_CONFIG as CONFIG
from testkit.graphs import StackSpec, build_stack, run_stack, stack_reference, stack_steps
from test_properties import max_error, tolerance   # noqa: E402  (tests/ is on sys.path)

# one recurrent layer (before layer 0's attention), then two attention layers that own their caches
SMALLEST = StackSpec(k_source=(0, 1), heads=2, kv_heads=2, head_dim=4, recurrent_layers=(0,))


@pytest.mark.parametrize("form", ["conv", "scan"])
def test_a_state_before_two_attention_layers_is_no_cache(form):
    """Each layer reads only its own caches. Before 2332c9a the analysis reported the state as one more cache
    that both SDPAs read, so both were ``shared``: ``layers.0.conv_state`` (conv), and (scan)
    ``layers.0.recurrent_state`` with the Loop as its unanalysed reader and an ``unhandled`` message that
    named the Loop."""
    spec = SMALLEST.with_(recurrent_form=form)
    analysis = analyze_kv_sharing(build_stack(spec))
    sdpa = [spec.sdpa_name(0), spec.sdpa_name(1)]
    assert {vid: list(cache.sdpa) for vid, cache in analysis.caches.items()} == {
        "past_key_values.0.key": sdpa[:1], "past_key_values.0.value": sdpa[:1],
        "past_key_values.1.key": sdpa[1:], "past_key_values.1.value": sdpa[1:]}
    assert {name: info.status for name, info in analysis.sdpa.items()} == dict.fromkeys(sdpa, "exclusive")
    assert [cache.unanalysed_readers for cache in analysis.caches.values()] == [()] * 4
    assert analysis.unhandled == []
    assert {vid: state.kind.value for vid, state in analysis.states.items()} == {spec.state_variable_id(0, form): form}


@pytest.mark.parametrize("chunk", [None, 2], ids=["prefill", "chunked_prefill"])
@pytest.mark.parametrize("form", ["conv", "scan"])
def test_hybrid_stack_matches_its_reference(core, form, chunk):
    """The CPU plugin runs a hybrid stack (recurrent blocks before an owner and a borrower) as
    stack_reference computes it, over a prefill (one step, or chunks of 2 tokens) and decode steps; the
    recurrent blocks change the output."""
    spec = StackSpec(k_source=(0, 1, 0), recurrent_layers=(0, 2), recurrent_form=form, mask="float", batch=2)
    steps = stack_steps(spec, prefill=5, decode=3, chunk=chunk)
    got = run_stack(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    expected = stack_reference(spec, steps)
    assert max_error(got, expected) <= tolerance(spec, expected)
    without = stack_reference(spec.with_(recurrent_layers=()), steps)
    assert min(float(np.abs(e - w).max()) for e, w in zip(expected, without)) > 0.1
