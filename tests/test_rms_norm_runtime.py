"""The CPU RMS kernel of openvino 2026.2.1 and a norm narrower than one vector register (docs/runtimes.md).

2026.2.1 fuses ``x * (ReduceMean(Power(x, 2), -1) + eps)^-0.5 * gamma`` into its RMS node, whose JIT
kernel multiplies full vectors in a loop whose counter starts at ``size // lanes`` (16 f32 lanes with
AVX-512, 8 with AVX2) and is tested after the first pass only: a norm over fewer floats than one vector
(Gemma 4's head size 8 on AVX-512: e2b35's and a26's q_norm / k_norm) wraps the counter and stores past
the output until it faults. The same norm with the square written ``Multiply(x, x)`` is not fused there
and runs. Each 2026.2.1 case runs in a child process under .venvs/ov-2026.2.1 (``bash tools/venv.sh ov
2026.2.1``), skipped where that venv is missing: a segfault is the
result, not the end of the test run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.graphs import RMSNormSpec, build_rms_norm, rms_norm_inputs, rms_norm_reference

ROOT = Path(__file__).resolve().parent.parent
AFFECTED = ROOT / ".venvs" / "ov-2026.2.1" / "bin" / "python"
needs_affected = pytest.mark.skipif(not AFFECTED.exists(),
                                    reason="needs .venvs/ov-2026.2.1 (bash tools/venv.sh ov 2026.2.1)")
# f32 against float64 over at most 24 values of O(1): measured at most 5e-7 on 2026.2.1 and 2026.4.1
ATOL = 1e-5

# prints the compiled layer types (before inferring, so that a crash still shows them), then the output
RUN_UNDER = """
import json, sys
import openvino as ov
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.graphs import RMSNormSpec, build_rms_norm, rms_norm_inputs
spec = RMSNormSpec(**json.loads(sys.argv[1]))
compiled = ov.Core().compile_model(build_rms_norm(spec), "CPU", EXACT_CPU_CONFIG)
layers = sorted({op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()})
print(json.dumps({"runtime": ov.get_version(), "layers": layers}), flush=True)
print(json.dumps({"output": compiled(rms_norm_inputs(spec))[0].tolist()}), flush=True)
"""


def vector_floats(isa: str) -> int:
    """f32 lanes of the RMS kernel's vectors: 16 where the plugin takes its AVX-512 kernel, else 8 (AVX2)."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    avx512_core = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    return 16 if isa == "native" and avx512_core else 8


def run_affected(spec: RMSNormSpec, isa: str = "native") -> tuple[int, dict]:
    """Exit status and printed results of ``spec`` run under 2026.2.1; ``isa="AVX2"`` caps the JIT kernels
    at AVX2 through oneDNN's ONEDNN_MAX_CPU_ISA, which the CPU plugin's kernels follow."""
    fields = {"size": spec.size, "rows": list(spec.rows), "square": spec.square, "dynamic": spec.dynamic}
    env = {**os.environ, **({"ONEDNN_MAX_CPU_ISA": isa} if isa != "native" else {})}
    proc = subprocess.run([str(AFFECTED), "-c", RUN_UNDER, json.dumps(fields)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-2000:]
    assert lines[0]["runtime"].startswith("2026.2.1"), lines[0]
    return proc.returncode, {k: v for line in lines for k, v in line.items()}


def assert_matches_reference(spec: RMSNormSpec, output) -> None:
    np.testing.assert_allclose(np.asarray(output), rms_norm_reference(spec, rms_norm_inputs(spec)), rtol=0, atol=ATOL)


@pytest.mark.matrix
@needs_affected
@pytest.mark.parametrize("isa", ["native", "AVX2"])
@pytest.mark.parametrize("size", [1, 7, 8, 15, 16, 17, 24])
def test_affected_rms_kernel_faults_below_one_vector(size, isa):
    """Pinned defect: a norm over fewer floats than one vector register faults, one vector or more runs.
    If the fault goes away, a fixed 2026.2 build is installed: re-measure docs/runtimes.md."""
    spec = RMSNormSpec(size=size)
    returncode, result = run_affected(spec, isa)
    assert "RMS" in result["layers"], result   # fused: what follows is the RMS node's doing
    if size < vector_floats(isa):
        assert returncode == -signal.SIGSEGV, (returncode, result)
    else:
        assert returncode == 0, (returncode, result)
        assert_matches_reference(spec, result["output"])


@pytest.mark.matrix
@needs_affected
def test_affected_rms_kernel_faults_with_static_shapes_too():
    returncode, result = run_affected(RMSNormSpec(size=8, dynamic=False))
    assert "RMS" in result["layers"] and returncode == -signal.SIGSEGV, (returncode, result)


@pytest.mark.matrix
@needs_affected
@pytest.mark.parametrize("size", [1, 8, 15])
def test_affected_square_as_multiply_is_not_fused_and_runs(size):
    """The graph form that avoids the kernel: the same norm, squared with Multiply(x, x)."""
    spec = RMSNormSpec(size=size, square="multiply")
    returncode, result = run_affected(spec)
    assert returncode == 0 and "RMS" not in result["layers"], (returncode, result)
    assert_matches_reference(spec, result["output"])


@pytest.mark.parametrize("square", ["power", "multiply"])
def test_newest_fuses_and_runs_the_narrow_rms_norm(square):
    """The installed (newest) runtime fuses both forms and runs a norm over 8 values."""
    spec = RMSNormSpec(size=8, square=square)
    compiled = ov.Core().compile_model(build_rms_norm(spec), "CPU", EXACT_CPU_CONFIG)
    layers = {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}
    assert "RMS" in layers, layers
    assert_matches_reference(spec, compiled(rms_norm_inputs(spec))[0])
