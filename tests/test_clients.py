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

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
OVPASS = Path(sys.executable).with_name("ovpass")
EXPORT_PYTHON = ROOT / ".venvs" / "export" / "bin" / "python"
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
TEXT_FIXTURES = ["gemma4/tiny8"]

genai = pytest.importorskip("openvino_genai", reason="openvino_genai is not installed in this environment")


@pytest.fixture(scope="module", params=TEXT_FIXTURES)
def rewritten(request, tmp_path_factory) -> tuple[Path, dict]:
    """The fixture folder rewritten by the CLI for the installed runtime, and its reference."""
    source = FIXTURES / request.param
    target = tmp_path_factory.mktemp("clients") / "fixed"
    result = subprocess.run([str(OVPASS), "rewrite", str(source), "-o", str(target)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return target, json.loads((source / "reference.json").read_text())


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
    # the folder's own tokenizer and detokenizer were copied and still load
    tokenizer = pipe.get_tokenizer()
    text = tokenizer.decode(reference["generated_ids"])
    assert text.split()[0] == f"w{reference['generated_ids'][0]}"


OPTIMUM = """
import json, sys, torch
from optimum.intel import OVModelForCausalLM
folder, reference = sys.argv[1], json.loads(open(sys.argv[2]).read())
model = OVModelForCausalLM.from_pretrained(folder, device="CPU", ov_config=json.loads(sys.argv[3]))
ids = torch.tensor([reference["prompt_ids"]])
n = len(reference["generated_ids"])
out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False)
print(json.dumps(out[0, ids.shape[1]:].tolist()))
"""


@pytest.mark.slow
@pytest.mark.skipif(not EXPORT_PYTHON.exists(), reason="needs .venvs/export (bash tools/venv.sh export)")
def test_optimum_intel_generates_the_reference_from_the_rewritten_folder(rewritten, tmp_path):
    folder, reference = rewritten
    ref_file = tmp_path / "reference.json"
    ref_file.write_text(json.dumps(reference))
    proc = subprocess.run([str(EXPORT_PYTHON), "-c", OPTIMUM, str(folder), str(ref_file), json.dumps(EXACT)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == reference["generated_ids"]
