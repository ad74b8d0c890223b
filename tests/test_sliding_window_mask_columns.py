"""The sliding layers' key columns built from the mask's inputs (mask_columns, issue 32).

Structure: after ``rewrite(sliding_window="trimmable")`` no sliding layer's SDPA reads a Slice of the whole mask's
Select, and that Select is gone (the plugin never computes the whole [n, T+n] sliding mask). Numbers: on the
exporters' own masks (transformers 5: Gemma 3, gpt-oss, Gemma 4), the narrowed columns equal the columns of the
whole mask, with a padded attention_mask, a past, and every start from 0 to T.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

import ovpasses
from ovpasses._ov import is_sdpa
from ovpasses.features.sliding_window.mask_columns import narrow_key_columns
from ovpasses.features.sliding_window.masks import MASK_PORT, find_sliding_window_masks

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ["gemma3/text6", "gpt-oss/tiny4", "gemma4/tiny8", "cohere2/tiny4", "exaone4/tiny4", "gemma2/tiny4",
            "mistral/allsliding"]


def _read(family: str) -> ov.Model:
    return ov.Core().read_model(ROOT / "tests" / "fixtures" / family / "openvino_model.xml")


def _sliding_selects(model: ov.Model) -> dict[str, ov.Node]:
    names = {mask.select for mask in find_sliding_window_masks(n for n in model.get_ordered_ops() if is_sdpa(n))}
    return {n.get_friendly_name(): n for n in model.get_ordered_ops() if n.get_friendly_name() in names}


@pytest.mark.parametrize("family", FIXTURES)
def test_no_sliding_layer_reads_a_slice_of_the_whole_mask(family):
    selects = _sliding_selects(_read(family))
    assert selects, "the fixture has a sliding-window mask"
    model = _read(family)
    ovpasses.rewrite(model, sliding_window="trimmable")
    names = {n.get_friendly_name() for n in model.get_ordered_ops()}
    assert not set(selects) & names, "the whole sliding mask is still computed"
    for sdpa in (n for n in model.get_ordered_ops() if is_sdpa(n) and n.get_input_size() > MASK_PORT):
        mask = sdpa.input_value(MASK_PORT).get_node()
        if mask.get_type_name() == "Slice":
            assert mask.input_value(0).get_node().get_friendly_name() not in selects


def _feed(request: ov.InferRequest, ids: list[int], past: int, padding: int) -> None:
    attention = np.ones((1, past + len(ids)), np.int64)
    attention[0, :padding] = 0
    request.infer({"input_ids": np.asarray(ids, np.int64)[None], "attention_mask": attention,
                   "position_ids": np.arange(past, past + len(ids), dtype=np.int64)[None],
                   "beam_idx": np.zeros(1, np.int32)})


@pytest.mark.parametrize("open_end", [False, True], ids=["end", "open-end"])
@pytest.mark.parametrize("family", FIXTURES)
def test_the_narrowed_columns_are_the_whole_masks_columns(family, open_end):
    """A 9-token prompt with 3 padded positions, then 4 new tokens (T = 9, n = 4): columns [s, 13) for s in 0..9
    (the end given, or open as the trimmable pass builds it), against the whole mask of the same inference, exactly."""
    model = _read(family)
    selects = _sliding_selects(model)
    start = ops.parameter([1], ov.Type.i64, name="narrow_start")
    end = ops.parameter([1], ov.Type.i64, name="narrow_end")
    outputs = []
    for select in selects.values():
        narrowed = narrow_key_columns(select.output(0), start.output(0), None if open_end else end.output(0))
        assert narrowed is not None
        outputs += [select.output(0), narrowed[0]]
    model.add_parameters([start] if open_end else [start, end])
    model.add_outputs(outputs)
    compiled = ov.Core().compile_model(model, "CPU")
    first = len(model.outputs) - len(outputs)
    for s in range(0, 10):
        request = compiled.create_infer_request()
        request.set_tensor("narrow_start", ov.Tensor(np.array([0], np.int64)))
        if not open_end:
            request.set_tensor("narrow_end", ov.Tensor(np.array([9], np.int64)))
        _feed(request, [5, 6, 7, 8, 9, 10, 11, 12, 13], 0, 3)
        request.set_tensor("narrow_start", ov.Tensor(np.array([s], np.int64)))
        if not open_end:
            request.set_tensor("narrow_end", ov.Tensor(np.array([13], np.int64)))
        _feed(request, [14, 15, 16, 17], 9, 3)
        for i in range(0, len(outputs), 2):
            whole = request.get_output_tensor(first + i).data
            narrow = request.get_output_tensor(first + i + 1).data
            assert whole.shape[-2:] == (4, 13)
            assert narrow.shape == whole[..., s:13].shape
            np.testing.assert_array_equal(narrow, whole[..., s:13])
            assert (narrow < 0).any() and (narrow == 0).any()   # both unseen and seen columns


@pytest.mark.parametrize("mode", ["numpy", "bidirectional"])
def test_broadcast_modes_and_a_dynamic_axis_that_is_one_at_run_time(mode):
    """A mask of the same shape built by hand: a numpy or bidirectional Broadcast, and a leaf whose last axis is
    dynamic and 1 at run time (broadcast: read whole, not sliced)."""
    kv = ops.parameter([1, 1, 1, -1], ov.Type.i64, name="kv")
    q = ops.parameter([1, 1, -1, -1], ov.Type.i64, name="q")            # [1, 1, n, 1] at run time
    pad = ops.parameter([-1, 1, 1, -1], ov.Type.boolean, name="pad")
    start = ops.parameter([1], ov.Type.i64, name="start")
    seen = ops.logical_and(ops.logical_and(ops.greater(kv, ops.add(q, ops.constant(np.array(-4, np.int64)))),
                                           ops.less_equal(kv, q)), pad)
    shape = ops.concat([ops.gather(ops.shape_of(pad), ops.constant(np.array([0])), ops.constant(np.array(0))),
                        ops.constant(np.array([1], np.int64)),
                        ops.gather(ops.shape_of(q), ops.constant(np.array([2])), ops.constant(np.array(0))),
                        ops.gather(ops.shape_of(kv), ops.constant(np.array([3])), ops.constant(np.array(0)))], 0)
    mask = ops.select(ops.broadcast(seen, shape, broadcast_spec=mode.upper()),
                      ops.constant(np.array(0.0, np.float32)), ops.constant(np.array(-1e9, np.float32)))
    narrowed, _ = narrow_key_columns(mask.output(0), start.output(0))
    compiled = ov.Core().compile_model(ov.Model([mask, narrowed.get_node()], [kv, q, pad, start]), "CPU")
    T, n = 9, 3
    padding = np.ones((2, 1, 1, T + n), bool)
    padding[1, ..., :2] = False
    for s in range(T + 1):
        whole, part = compiled({"kv": np.arange(T + n)[None, None, None], "q": np.arange(T, T + n)[None, None, :, None],
                                "pad": padding, "start": np.array([s])}).values()
        assert whole.shape == (2, 1, n, T + n)
        np.testing.assert_array_equal(part, whole[..., s:])


SLICE_OF_SELECT = """
import json
import numpy as np, openvino as ov
from openvino import opset13 as ops, opset8
def i64(v): return ops.constant(np.asarray(v, np.int64).reshape(-1))
x = ops.parameter([1, 1, 1, -1], ov.Type.i64, name="x")
s = ops.parameter([1], ov.Type.i64, name="s")
one = ops.equal(ops.gather(ops.shape_of(x, "i64"), i64([-1]), i64([0])), i64([1]))
selected = opset8.slice(x, ops.select(one, i64([0]), s), ops.select(one, i64([1]), i64([2**31 - 1])), i64([1]), i64([-1]))
w = ops.convert(one, ov.Type.i64)
other = ops.subtract(i64([1]), w)
arithmetic = opset8.slice(x, ops.multiply(s, other), ops.add(ops.multiply(i64([2**31 - 1]), other), w), i64([1]), i64([-1]))
compiled = ov.Core().compile_model(ov.Model([selected, arithmetic], [x, s]), "CPU")
out = compiled({"x": np.arange(7, dtype=np.int64)[None, None, None], "s": np.array([3])})
print(json.dumps({"select": list(out[0].shape), "arithmetic": list(out[1].shape)}))
"""


@pytest.mark.parametrize("version", ["2025.2.0", "2025.4.1"])
def test_a_slice_of_select_computed_bounds_on_older_runtimes(version):
    """Runtime defect (docs/runtimes.md): openvino 2025.2.0's CPU Slice reads bounds that a Select computed as an
    empty range (columns [3, end) of 7: 0 instead of 4); 2025.4.1 reads them right. The narrowing computes those
    bounds in arithmetic (``_narrow_leaf``), which both read right. Run under each venv, skipped where it is absent."""
    import json
    import subprocess

    python = ROOT / ".venvs" / f"ov-{version}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"needs .venvs/ov-{version} (bash tools/venv.sh ov {version})")
    proc = subprocess.run([str(python), "-c", SLICE_OF_SELECT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shapes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert shapes["arithmetic"] == [1, 1, 1, 4]
    assert shapes["select"] == ([1, 1, 1, 0] if version == "2025.2.0" else [1, 1, 1, 4])
