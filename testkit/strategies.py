"""Hypothesis strategies over the shared graph builders of :mod:`testkit.graphs`.

They draw *specifications* (:class:`~testkit.graphs.StackSpec`), never graphs built here:
the graph always comes from :func:`~testkit.graphs.build_stack`, so a property test, a
benchmark and a hand-written test see the same construction. Every axis the builder has is drawn:

* number of layers and the KV-sharing layout: owners, borrowers (several per owner included),
  stateless layers, no sharing at all, and Gemma-style layouts from
  :func:`~testkit.graphs.sharing_layout`;
* K and V shared jointly (``v_source=None``) or each with its own layout;
* how a borrower reaches its owner's cache: through the owner's Concat, or through its own
  Gather/Concat on the owner's ReadValue (``borrow_path="own_concat"``, off the Assign's path);
* BHSD caches, or BSHD caches that reach the SDPA through a Transpose;
* GQA ratio and broadcast form (``shapeof`` / ``bidirectional``), or no GQA;
* a Convert on the cache path (cache element type unlike the model's);
* Gather(beam_idx) present or absent;
* extra shape-only consumers of a cache (``past_length_from`` at the Concat, Gather or ReadValue);
* mask kind (none, bool, float, causal) and scale (absent, explicit, pre-scaled Q);
* static or dynamic batch (the sequence dimension of a cache is always dynamic), batch 1 or 2;
* f32 or f16;
* in a quarter of the examples, recurrent layers (any non-empty subset of the layers, owners, borrowers,
  stateless layers and layer 0 included) with a conv state or a linear-attention state scanned in a Loop:
  a hybrid model's states, which are not KV caches.

:func:`hybrid_stack_specs` always draws recurrent layers, at least one of them before (or at) a layer whose
attention reads a cache: the layout in which a state's data reaches a cache reader's K/V projections.

:func:`heads_stack_specs` draws :class:`~testkit.graphs.HeadsStackSpec` head layouts (KV heads,
head sizes, KV-shared borrowers, K = V layers, scale present or not) for the paged head padding.

Settings profiles for the property tests are registered here too (see :func:`register_profiles`).
"""

from __future__ import annotations

import os
from typing import Literal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from testkit.graphs import HeadsStackSpec, StackSpec, sharing_layout

Sources = tuple[int | None, ...]

PROFILE_ENV = "HYPOTHESIS_PROFILE"
MAX_EXAMPLES_ENV = "HYPOTHESIS_MAX_EXAMPLES"


def register_profiles() -> str:
    """Register the ``ci`` and ``thorough`` profiles and load the one ``$HYPOTHESIS_PROFILE`` names.

    ``ci`` (default) draws 30 examples per property, the default test run's share (50 until 2026-12-08);
    ``thorough`` runs at least 10,000 examples per property. Both have no deadline: compiling a model on
    the CPU plugin takes tens of milliseconds with a long tail that says nothing about the code under test.
    """
    common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
    settings.register_profile("ci", max_examples=30, **common)
    settings.register_profile("thorough", max_examples=10_000, **common)
    name = os.environ.get(PROFILE_ENV, "ci")
    settings.load_profile(name)
    # a long run can be split over processes (the CPU plugin leaks a thread per failing inference, so
    # one process cannot run 10,000 examples of every property): HYPOTHESIS_MAX_EXAMPLES=5000 with
    # two --hypothesis-seed values runs the 10,000 examples of the thorough profile in two processes
    if os.environ.get(MAX_EXAMPLES_ENV):
        settings.register_profile(f"{name}-split", settings.get_profile(name),
                                  max_examples=int(os.environ[MAX_EXAMPLES_ENV]))
        settings.load_profile(f"{name}-split")
    return name


@st.composite
def own_layouts(draw, num_layers: int, allow_stateless: bool = True) -> Sources:
    """Per layer: own a cache, borrow an earlier owner's, or (optionally) read no cache."""
    out: list[int | None] = []
    for i in range(num_layers):
        owners = [j for j in range(i) if out[j] == j]
        choices = ["own"] + (["borrow"] if owners else []) + (["stateless"] if allow_stateless else [])
        choice = draw(st.sampled_from(choices))
        if choice == "own":
            out.append(i)
        elif choice == "borrow":
            out.append(draw(st.sampled_from(owners)))
        else:
            out.append(None)
    return tuple(out)


@st.composite
def v_layouts(draw, k_source: Sources) -> Sources | None:
    """``None`` (V shared as K is) or a V layout of its own, stateless exactly where K is."""
    if draw(st.booleans()):
        return None
    out: list[int | None] = []
    for i, k in enumerate(k_source):
        if k is None:
            out.append(None)
            continue
        owners = [j for j in range(i) if out[j] == j]
        if owners and draw(st.booleans()):
            out.append(draw(st.sampled_from(owners)))
        else:
            out.append(i)
    return tuple(out)


def _reads_a_cache(layout: tuple[Sources, Sources | None]) -> bool:
    return any(k is not None for k in layout[0])


@st.composite
def recurrent_layer_sets(draw, k_source: Sources, before_a_reader: bool = False) -> tuple[int, ...]:
    """A non-empty set of layers with a recurrent block; ``before_a_reader``: one of them at or before a layer
    whose attention reads a cache (the block stands before its layer's attention)."""
    layers = range(len(k_source))
    readers = [i for i in layers if k_source[i] is not None]
    first = draw(st.sampled_from(range(readers[-1] + 1) if before_a_reader else layers))
    return tuple(sorted({first} | draw(st.sets(st.sampled_from(layers)))))


@st.composite
def kv_layouts(draw, max_layers: int = 5) -> tuple[Sources, Sources | None]:
    """``(k_source, v_source)`` for :class:`StackSpec`."""
    kind = draw(st.sampled_from(["any", "no_sharing", "gemma"]))
    if kind == "gemma":
        owners_per_kind = draw(st.integers(1, 2))
        num_layers = draw(st.integers(owners_per_kind + 1, max(owners_per_kind + 1, max_layers)))
        num_shared = draw(st.integers(1, num_layers - owners_per_kind))
        return sharing_layout(num_layers, num_shared, owners_per_kind), None
    num_layers = draw(st.integers(1, max_layers))
    if kind == "no_sharing":
        return tuple(range(num_layers)), None
    k_source = draw(own_layouts(num_layers))
    return k_source, draw(v_layouts(k_source))


def _value(x) -> st.SearchStrategy:
    return x if isinstance(x, st.SearchStrategy) else st.just(x)


RECURRENT_SHARE = 4   # stack_specs draws recurrent layers in one example out of RECURRENT_SHARE


@st.composite
def stack_specs(draw, max_layers: int = 5, recurrent: Literal["sometimes", "always"] = "sometimes",
                **fixed) -> StackSpec:
    """A :class:`StackSpec` over every builder axis; ``fixed`` pins an axis to a value or a strategy.

    ``recurrent="sometimes"`` draws recurrent layers in one example out of :data:`RECURRENT_SHARE`;
    ``"always"`` in every example, one of them at or before a layer that reads a cache (see
    :func:`hybrid_stack_specs`). ``recurrent_layers=()`` pins a stack without them.

    Example: ``stack_specs(dtype="f32", cache_type="f32")``.
    """
    hybrid = recurrent == "always"
    layouts = kv_layouts(max_layers)
    k_source, v_source = draw(layouts.filter(_reads_a_cache) if hybrid else layouts)
    heads = draw(_value(fixed.pop("heads", st.sampled_from([4, 2]))))
    kv_heads = draw(_value(fixed.pop("kv_heads", st.sampled_from([d for d in (heads, 2, 1) if heads % d == 0]))))
    owners = [i for i, s in enumerate(k_source) if s == i]
    past_length_from = tuple(sorted(draw(st.sets(st.sampled_from(owners), max_size=2)))) if owners else ()
    values = dict(
        k_source=k_source,
        v_source=v_source,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=st.sampled_from([8, 4]),
        layout=st.sampled_from(["BHSD", "BSHD"]),
        gqa_form=st.sampled_from(["shapeof", "bidirectional"]),
        cache_type=st.sampled_from(["f32", "f16"]),
        beam_gather=st.booleans(),
        past_length_from=past_length_from,
        past_length_at=st.sampled_from(["concat", "gather", "readvalue"]),
        borrow_path=st.sampled_from(["concat", "own_concat"]),
        mask=st.sampled_from(["none", "causal", "bool", "float"]),
        scale=st.sampled_from(["none", "explicit", "prescaled"]),
        scale_value=st.sampled_from([0.25, 0.3]),
        dtype=st.sampled_from(["f32", "f16"]),
        batch=st.integers(1, 2),
        dynamic_batch=st.booleans(),
        seed=st.integers(0, 3),
    )
    # drawn after the other axes, so that a stack without recurrent layers is drawn as it was before them
    # (False first: an example shrinks towards a stack without them)
    with_recurrent = st.just(True) if hybrid else st.sampled_from([False] * (RECURRENT_SHARE - 1) + [True])
    values.update(recurrent_layers=with_recurrent.flatmap(
        lambda drawn: recurrent_layer_sets(k_source, before_a_reader=hybrid) if drawn else st.just(())))
    values.update(fixed)
    drawn = {name: draw(_value(v)) for name, v in values.items() if name != "recurrent_form"}
    if drawn["recurrent_layers"] or "recurrent_form" in fixed:
        # the CPU plugin cannot compile some conv states read without a Gather(beam_idx) on a dynamic batch (see
        # StackSpec); exporters always write the Gather, and the scan form runs there
        forms = ["conv", "scan"] if drawn["beam_gather"] or not drawn["dynamic_batch"] else ["scan"]
        drawn["recurrent_form"] = draw(_value(fixed.get("recurrent_form", st.sampled_from(forms))))
        # nor, on a dynamic batch, many states beside f16 values or caches, with the Gather or without (see
        # StackSpec): such a stack is drawn on a static batch (exporters write f32 graphs with a dynamic one)
        if "f16" in (drawn["dtype"], drawn["cache_type"]) and "dynamic_batch" not in fixed:
            drawn["dynamic_batch"] = False
    return StackSpec(**drawn)


def hybrid_stack_specs(max_layers: int = 5, **fixed) -> st.SearchStrategy[StackSpec]:
    """A :class:`StackSpec` of a hybrid model: recurrent layers (conv or scan, ``fixed`` may pin
    ``recurrent_form``), one of them before an attention layer that reads a KV cache, every other axis as
    :func:`stack_specs` draws it."""
    return stack_specs(max_layers, recurrent="always", **fixed)


@st.composite
def sliding_stack_specs(draw, max_layers: int = 5) -> StackSpec:
    """A :class:`StackSpec` whose layers read transformers' sliding-window mask (``mask="sliding"``): a window of 2-5
    in either mask form, one layer that reads a cache attending without the window or none, the GQA expand mostly
    bidirectional, every other axis as :func:`stack_specs` draws it, in f32 three times in four (the exports of the
    sliding families are f32), else with an f16 model and cache (where the CPU plugin of 2026.1 and newer cannot run an
    f16 state of dynamic batch out of its fused kernel, which the bounding must leave whole)."""
    # the GQA expand mostly as the exports of every sliding family write it (a bidirectional Broadcast: measured on
    # the fixtures, transformers 4.57.6 and 5.5.4); the ShapeOf form, whose caches the modes refuse, one time in three
    dtype = draw(st.sampled_from(["f32", "f32", "f32", "f16"]))
    spec = draw(stack_specs(max_layers, mask="sliding", dtype=dtype, cache_type=dtype, window=st.integers(2, 5),
                            mask_form=st.sampled_from(["bitwise", "distance"]),
                            gqa_form=st.sampled_from(["bidirectional", "bidirectional", "shapeof"])))
    readers = [layer for layer, source in enumerate(spec.k_source) if source is not None]
    full = draw(st.sets(st.sampled_from(readers), max_size=1)) if readers else set()
    return spec.with_(full_layers=tuple(sorted(full)))


def sliding_step_counts() -> st.SearchStrategy[tuple[int, int]]:
    """``(prefill, decode)`` for a window of 2-5: a prefill of 2-9 and 1-5 steps, so that most runs pass it."""
    return st.tuples(st.integers(2, 9), st.integers(1, 5))


@st.composite
def heads_stack_specs(draw, max_layers: int = 4) -> HeadsStackSpec:
    """A :class:`HeadsStackSpec` with one query-head count (as Gemma 3n and 4) and per owner layer a KV-head
    count dividing it and a head size, some layers borrowing an earlier owner's caches (its layout) and
    some storing their K as V; the SDPA scale explicit or absent."""
    heads = draw(st.sampled_from([4, 8]))
    layers, sources, k_eq_v = [], [], []
    for i in range(draw(st.integers(2, max_layers))):
        owners = [j for j in range(i) if sources[j] == j]
        if owners and draw(st.booleans()):
            source = draw(st.sampled_from(owners))
            layers.append(layers[source])
            sources.append(source)
            continue
        kv_heads = draw(st.sampled_from([d for d in (1, 2, 4) if heads % d == 0]))
        layers.append((heads, kv_heads, draw(st.sampled_from([4, 8, 16]))))
        sources.append(i)
        if draw(st.booleans()):
            k_eq_v.append(i)
    # at scale 1 some drawn K = V stacks make float32 itself lose 5e-4 against float64 (padded or not): the
    # softmax is that sharp; the hand-written specs of tests/test_paged_heads.py cover scale 1
    scale = draw(st.sampled_from([0.5, None]))
    return HeadsStackSpec(tuple(layers), kv_source=tuple(sources), k_eq_v=tuple(k_eq_v), scale=scale,
                          seed=draw(st.integers(0, 3)))


def step_counts() -> st.SearchStrategy[tuple[int, int]]:
    """``(prefill, decode)`` for :func:`~testkit.graphs.stack_steps`."""
    # a prefill of at least 2: with batch 2 the first row is left-padded by one position
    return st.tuples(st.integers(2, 5), st.integers(1, 3))
