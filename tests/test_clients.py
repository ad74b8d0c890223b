"""Rewritten export folders in the clients users run: openvino_genai and optimum-intel.

``ovpass rewrite EXPORT -o FIXED`` writes a folder; these tests load FIXED the way users do (the
folder path, its own tokenizer and configs) and compare the greedy tokens with transformers'
(each fixture's reference.json). optimum-intel needs torch (``.venvs/export``): those tests are
in the slow tier (``--runslow``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ovpasses.precision import EXACT_CPU_CONFIG as EXACT
from testkit.cli import run_main
from testkit.greedy import vlm_pipeline_tokens

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXPORT_PYTHON = ROOT / ".venvs" / "export" / "bin" / "python"
TEXT_FIXTURES = ["gemma4/tiny8", "gemma3n/tiny8"]
VLM = FIXTURES / "gemma4" / "vlm8"
AFFECTED_PYTHON = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"

genai = pytest.importorskip("openvino_genai", reason="openvino_genai is not installed in this environment")


def rewrite_folder(source: Path, parent: Path, *runtime: str) -> Path:
    target = parent / "fixed"
    result = run_main("rewrite", source, "-o", target, *runtime)   # the CLI, in this process
    assert result.returncode == 0, result.stderr
    return target


@pytest.fixture(scope="module", params=TEXT_FIXTURES)
def rewritten(request, tmp_path_factory) -> tuple[Path, dict]:
    """The fixture folder rewritten by the CLI for the installed runtime, and its reference."""
    source = FIXTURES / request.param
    return rewrite_folder(source, tmp_path_factory.mktemp("clients")), json.loads((source / "reference.json").read_text())


@pytest.fixture(scope="module")
def rewritten_vlm(tmp_path_factory) -> Path:
    return rewrite_folder(VLM, tmp_path_factory.mktemp("vlm"))


def vlm_cases() -> list[dict]:
    """vlm8's prompts: the chat text alone, and with its generated image."""
    reference = json.loads((VLM / "reference.json").read_text())
    cases = [{"name": "text", "prompt": reference["prompt_text"], "expected": reference["generated_ids"],
              "image": None}]
    image = reference["image_prompt"]
    cases.append({"name": "image", "prompt": image["prompt_text"], "expected": image["generated_ids"],
                  "image": np.load(VLM / image["image"]["file"])})
    return cases


@pytest.mark.parametrize("case", vlm_cases(), ids=lambda c: c["name"])
@pytest.mark.parametrize("path", ["stateful", "paged"])
def test_vlm_pipeline_decodes_the_reference_from_the_rewritten_folder(rewritten_vlm, path, case):
    assert vlm_pipeline_tokens(rewritten_vlm, path, case["prompt"], case["image"], len(case["expected"]),
                               EXACT) == case["expected"]


@pytest.mark.skipif(not AFFECTED_PYTHON.exists(), reason=f"needs {AFFECTED_PYTHON} (bash tools/venv.sh ov 2026.0.0)")
def test_vlm_pipeline_of_2026_0_does_not_know_gemma4(rewritten_vlm):
    """openvino_genai 2026.0 (and 2026.1) refuse the model type: a Gemma 4 VLM export runs there only
    through ov.Core (check, ov_greedy) or optimum-intel. Pinned so that a change is noticed."""
    script = ("import sys, openvino_genai as g\n"
              "try:\n    g.VLMPipeline(sys.argv[1], 'CPU', ATTENTION_BACKEND='SDPA')\n"
              "except RuntimeError as e:\n    print(str(e).strip().splitlines()[-1])\n")
    proc = subprocess.run([str(AFFECTED_PYTHON), "-c", script, str(rewritten_vlm)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "Unsupported 'gemma4' VLM model type" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", ["stateful", "paged"])
def test_llm_pipeline_decodes_the_reference_from_the_rewritten_folder(rewritten, path):
    folder, reference = rewritten
    kwargs = {"ATTENTION_BACKEND": "SDPA"} if path == "stateful" else {"scheduler_config": genai.SchedulerConfig()}
    pipe = genai.LLMPipeline(str(folder), "CPU", **kwargs, **EXACT)
    config = genai.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = len(reference["generated_ids"])
    config.do_sample = False
    ids = np.array([reference["prompt_ids"]], np.int64)
    result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
    assert [int(t) for t in result.tokens[0]] == reference["generated_ids"]
    # the folder's own tokenizer and detokenizer were copied and still load: decode and encode agree
    tokenizer = pipe.get_tokenizer()
    text = tokenizer.decode(reference["generated_ids"])
    assert list(tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]) == reference["generated_ids"]


OPTIMUM = """
import json, sys, torch
import optimum.intel
model_class, folder, reference = getattr(optimum.intel, sys.argv[1]), sys.argv[2], json.loads(open(sys.argv[3]).read())
model = model_class.from_pretrained(folder, device="CPU", ov_config=json.loads(sys.argv[4]))
ids = torch.tensor([reference["prompt_ids"]])
n = len(reference["generated_ids"])
out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                     do_sample=False)
print(json.dumps(out[0, ids.shape[1]:].tolist()))
"""


def optimum_generate(model_class: str, folder: Path, reference: dict, tmp_path: Path) -> list[int]:
    """Greedy tokens of optimum-intel's ``model_class`` on ``folder`` (in .venvs/export: it needs torch)."""
    ref_file = tmp_path / "reference.json"
    ref_file.write_text(json.dumps(reference))
    proc = subprocess.run([str(EXPORT_PYTHON), "-c", OPTIMUM, model_class, str(folder), str(ref_file),
                           json.dumps(EXACT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not EXPORT_PYTHON.exists(), reason="needs .venvs/export (bash tools/venv.sh export)")
def test_optimum_intel_generates_the_reference_from_the_rewritten_folder(rewritten, tmp_path):
    folder, reference = rewritten
    assert optimum_generate("OVModelForCausalLM", folder, reference, tmp_path) == reference["generated_ids"]


@pytest.mark.slow
@pytest.mark.skipif(not EXPORT_PYTHON.exists(), reason="needs .venvs/export (bash tools/venv.sh export)")
def test_optimum_intel_generates_the_vlm_reference_from_the_rewritten_folder(rewritten_vlm, tmp_path):
    reference = json.loads((VLM / "reference.json").read_text())
    assert optimum_generate("OVModelForVisualCausalLM", rewritten_vlm, reference, tmp_path) == reference["generated_ids"]


BOUNDED_CASES = [("gemma4/tiny8", None), ("gemma4/tiny8u", "long_prompt")]


@pytest.mark.slow
@pytest.mark.skipif(not EXPORT_PYTHON.exists(), reason="needs .venvs/export (bash tools/venv.sh export)")
@pytest.mark.parametrize("fixture,prompt", BOUNDED_CASES, ids=[f"{f}-{p or 'prompt'}" for f, p in BOUNDED_CASES])
def test_optimum_intel_generates_the_reference_from_a_bounded_folder(fixture, prompt, tmp_path):
    """``ovpass rewrite --sliding-window bounded``: OVModelForCausalLM.generate decodes transformers' tokens
    while the sliding caches hold W-1 positions (prompt + new tokens run past the window: 32 and 48 > 16)."""
    from ovpasses.analysis.kv_sharing import analyze_kv_sharing

    source = FIXTURES / fixture
    reference = json.loads((source / "reference.json").read_text())
    reference = reference[prompt] if prompt else reference
    window = json.loads((source / "config.json").read_text())["sliding_window"]
    assert len(reference["prompt_ids"]) + len(reference["generated_ids"]) > window
    folder = rewrite_folder(source, tmp_path, "--sliding-window", "bounded")
    bounded = [v for v, c in analyze_kv_sharing(ov.Core().read_model(folder / "openvino_model.xml")).caches.items()
               if c.bounded]
    assert len(bounded) == 6
    assert optimum_generate("OVModelForCausalLM", folder, reference, tmp_path) == reference["generated_ids"]
