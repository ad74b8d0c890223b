"""Each exported fixture's reference.json agrees with its IR files and its tokenizer (no inference:
what the export recorded is what the folder holds). The fixtures are made by tools/export_gemma4.py."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from export_gemma4 import describe_ir  # noqa: E402  (the description the export wrote into reference.json)

FIXTURE_DIRS = sorted(p.parent for p in (ROOT / "tests" / "fixtures").glob("*/*/reference.json"))


def load(folder: Path) -> dict:
    return json.loads((folder / "reference.json").read_text())


def text_config(reference: dict) -> dict:
    return reference["config"].get("text_config", reference["config"])


def test_all_fixtures_found():
    assert {f"{p.parent.name}/{p.name}" for p in FIXTURE_DIRS} >= {
        "gemma4/tiny8", "gemma4/e2b35", "gemma4/vlm8", "gemma4/a26", "gemma3n/tiny8"}


@pytest.mark.parametrize("folder", FIXTURE_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reference_describes_the_ir(folder):
    reference = load(folder)
    recorded = reference["ir"]
    if "inputs" in recorded:   # one decoder IR; multimodal folders record each IR by file name
        recorded = {"openvino_model.xml": recorded}
    for xml, description in recorded.items():
        assert describe_ir(folder / xml) == description, xml
    for name in ("config.json", "generation_config.json", "openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        assert (folder / name).exists(), name

    config = text_config(reference)
    prompts = [reference] + [reference[k] for k in ("image_prompt", "long_prompt") if k in reference]
    for prompt in prompts:
        assert len(prompt["generated_ids"]) == reference["max_new_tokens"]
        assert all(0 <= t < config["vocab_size"] for t in prompt["prompt_ids"] + prompt["generated_ids"])
    decoder = next(d for xml, d in recorded.items() if xml in ("openvino_model.xml", "openvino_language_model.xml"))
    assert decoder["outputs"]["logits"][1].endswith(f",{config['vocab_size']}]")
    if "kv_sharing" not in reference:   # a hybrid export (tools/export_hybrids.py): conv / SSM states beside caches
        assert sorted(s["id"] for s in reference["states"]) == sorted(decoder["states"])
        assert len(reference["layers"]) == config["num_hidden_layers"]
        return
    owners = reference["kv_sharing"]["cache_owners"]
    # one key and one value state per cache owner, numbered over the owners in order
    slots = {int(re.match(r"past_key_values\.(\d+)\.(?:key|value)", v)[1]) for v in decoder["states"]}
    assert len(decoder["states"]) == 2 * len(owners) and slots == set(range(len(owners)))
    assert decoder["outputs"]["logits"][1].endswith(f",{config['vocab_size']}]")
    assert len(reference["kv_sharing"]["layers"]) == config["num_hidden_layers"]
    assert len(config.get("layer_types") or reference["layers"]) == config["num_hidden_layers"]   # Mistral: none
    assert len(owners) == config["num_hidden_layers"] - reference["kv_sharing"]["num_kv_shared_layers"]



@pytest.mark.parametrize("folder", [p for p in FIXTURE_DIRS if (p / "openvino_language_model.xml").exists()
                                    and p.parent.name == "gemma4"], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_multimodal_reference_agrees_with_tokenizer_and_processor(folder):
    reference, config = load(folder), json.loads((folder / "config.json").read_text())
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    # the multimodal token ids of the model are the tokenizer's ids of Gemma 4's token strings
    for config_key, token_key in (("image_token_id", "image_token"), ("boi_token_id", "boi_token"),
                                  ("eoi_token_id", "eoi_token"), ("video_token_id", "video_token")):
        assert vocab[tokenizer_config[token_key]] == config[config_key], token_key
    assert "<|image|>" in (folder / "chat_template.jinja").read_text()

    image_prompt = reference["image_prompt"]
    ids = image_prompt["prompt_ids"]
    n = image_prompt["num_image_tokens"]
    start = ids.index(config["boi_token_id"])
    assert ids[start + 1:start + 1 + n] == [config["image_token_id"]] * n
    assert ids[start + 1 + n] == config["eoi_token_id"] and ids.count(config["image_token_id"]) == n
    # the text prompt is the image prompt without the image block
    assert ids[:start] + ids[start + n + 2:] == reference["prompt_ids"]

    image = np.load(folder / image_prompt["image"]["file"])
    assert list(image.shape) == image_prompt["image"]["shape"] and image.dtype == np.uint8
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    patch, pool = processor["patch_size"], processor["pooling_kernel_size"]
    assert config["vision_config"]["patch_size"] == patch and config["vision_config"]["pooling_kernel_size"] == pool
    # the image is kept at its size (no resize): its patches pool to n soft tokens
    assert (image.shape[0] // patch) * (image.shape[1] // patch) // pool ** 2 == n
    vision = reference["ir"]["openvino_vision_embeddings_model.xml"]
    assert vision["inputs"]["pixel_values"][1].endswith(f",{patch * patch * 3}]")
    language = reference["ir"]["openvino_language_model.xml"]["inputs"]
    text = config["text_config"]
    assert language["inputs_embeds"][1].endswith(f",{text['hidden_size']}]")
    assert language["per_layer_inputs"][1].endswith(f",{text['hidden_size_per_layer_input']}]")


def test_gemma3_vlm_reference_agrees_with_tokenizer_and_processor():
    """Gemma 3's image block: boi, mm_tokens_per_image image tokens, eoi (the ids of the tokenizer's strings,
    which genai's InputsEmbedderGemma3 looks up); the image is the processor's size; the language model takes
    token_type_ids (image tokens attend each other both ways)."""
    folder = ROOT / "tests" / "fixtures" / "gemma3" / "vlm6"
    reference, config = load(folder), json.loads((folder / "config.json").read_text())
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    for config_key, token_key in (("image_token_index", "image_token"), ("boi_token_index", "boi_token"),
                                  ("eoi_token_index", "eoi_token")):
        assert vocab[tokenizer_config[token_key]] == config[config_key], token_key
    image_prompt = reference["image_prompt"]
    ids, n = image_prompt["prompt_ids"], config["mm_tokens_per_image"]
    start = ids.index(config["boi_token_index"])
    assert image_prompt["num_image_tokens"] == n and ids.count(config["image_token_index"]) == n
    assert ids[start + 1:start + 1 + n] == [config["image_token_index"]] * n
    assert ids[start + 1 + n] == config["eoi_token_index"]
    image = np.load(folder / image_prompt["image"]["file"])
    size = json.loads((folder / "preprocessor_config.json").read_text())["size"]
    assert list(image.shape) == [size["height"], size["width"], 3] == image_prompt["image"]["shape"]
    assert config["vision_config"]["image_size"] == size["height"]
    assert "token_type_ids" in reference["ir"]["openvino_language_model.xml"]["inputs"]


def test_gemma3n_fixture_has_activation_sparsity_and_its_erfinv():
    """Gemma 3n's activation sparsity (first layers) is exported as ErfInv (opset17), which openvino
    reads from 2026.2 on: the fixture documents that requirement."""
    folder = ROOT / "tests" / "fixtures" / "gemma3n" / "tiny8"
    pattern = text_config(load(folder))["activation_sparsity_pattern"]
    assert pattern[0] > 0 and pattern[-1] == 0
    model = ov.Core().read_model(folder / "openvino_model.xml")
    assert any(op.get_type_name() == "ErfInv" for op in model.get_ops())
