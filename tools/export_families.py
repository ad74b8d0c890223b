#!/usr/bin/env python3
"""Build tiny random-weight models of the sliding-window families beyond Gemma 4 and export them to
OpenVINO IR, as ``optimum-cli export openvino`` exports the real ones.

The shared parts (the made-up WordLevel tokenizer, transformers' greedy reference and its checks, the
IR description, the tool versions) are ``tools/export_gemma4.py``'s; this script adds one entry per
family to :data:`FAMILIES`: the transformers config and model class, the tiny widths, the window W and
the layer pattern. Every model is exported by optimum-intel's own ``main_export`` (stateful,
``text-generation-with-past``, fp32 weights; ``image-text-to-text`` for the Gemma 3 VLM) and its tokenizer
converted by openvino_tokenizers. ``reference.json`` holds transformers' greedy tokens after two prompts,
one shorter than W (``prompt_ids`` / ``generated_ids``) and one longer (``long_prompt``), each decoded
several windows past W::

    .venvs/export/bin/python tools/export_families.py --family mistral-allsliding [--out DIR]

``--list`` prints the families and the folder each is committed in. Re-running gives the same bytes
(the script re-executes itself with PYTHONHASHSEED=0, as export_gemma4.py does).

Workarounds, each with its cause, are comments beside the code that makes them (the transformers bound
optimum-intel 2.2.0 puts on Gemma 2, Gemma 3 and EXAONE 4; the Gemma 3 VLM's ``preprocessor_config.json``);
what each fixture holds and how its clients decode it: ``tests/fixtures/FAMILIES.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_gemma4 as core  # noqa: E402  - the shared tokenizer, reference and IR helpers

SLIDING, FULL = core.SLIDING, core.FULL

# Minimal chat template in the shape of the real ones (openvino_genai's chat mode applies it).
GENERIC_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }} {{ message['content'] }} {{ eos_token if message['role'] == 'assistant' else '' }}"
    "{% endfor %}{% if add_generation_prompt %}assistant{% endif %}"
)

# Widths every family shares unless it says otherwise: 4 query heads on 2 KV heads of 16, hidden 64.
# The LM head is untied: with a tied one a tiny random Gemma or Cohere2 (which scale or normalise the
# embedding) mostly repeats its input token (measured: 1-10 distinct tokens of 32).
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=4096, initializer_range=0.08, tie_word_embeddings=False,
            pad_token_id=core.PAD_ID, eos_token_id=core.EOS_ID, bos_token_id=core.BOS_ID)


def layer_types(pattern: str, n: int) -> list[str]:
    return [SLIDING if pattern[i % len(pattern)] == "s" else FULL for i in range(n)]


# family -> how to build it. ``config``: transformers config class and its arguments; ``model``: the
# causal-LM class; ``window``: W; ``short``/``long``: prompt lengths (shorter and longer than W);
# ``new_tokens``: greedy tokens recorded (several windows past W); ``seed``: picked for the margin.
FAMILIES: dict[str, dict[str, Any]] = {
    # Mistral with sliding_window on every layer (as Mistral 7B v0.1 shipped): no cache keeps the whole
    # context. transformers 5.5.4's MistralConfig has no layer_types; sliding_window applies to every layer.
    "mistral-allsliding": dict(
        folder="tests/fixtures/mistral/allsliding",
        config="MistralConfig", model="MistralForCausalLM",
        args=dict(TINY, num_hidden_layers=4, sliding_window=8),
        window=8, pattern="s", short=6, long=24, new_tokens=32,
        seed=13,  # picked from 0..15: smallest top1-top2 gap 5.3e-3 over both prompts, 21+ distinct tokens
    ),
    # Gemma 3 text (Gemma3ForCausalLM, as gemma-3-1b-it): 5 sliding layers to 1 full, here 6 layers
    "gemma3-text": dict(
        folder="tests/fixtures/gemma3/text6",
        config="Gemma3TextConfig", model="Gemma3ForCausalLM",
        args=dict(TINY, num_hidden_layers=6, sliding_window=8, layer_types=layer_types("sssssf", 6),
                  query_pre_attn_scalar=16, final_logit_softcapping=30.0),
        window=8, pattern="sssssf", short=6, long=24, new_tokens=32,
        seed=9,  # picked from 0..9: smallest top1-top2 gap 3.4e-3 over both prompts, 24+ distinct tokens
        lift=["Gemma3TextOpenVINOConfig"],
    ),
    # Gemma 2: sliding and full alternate (1:1), logit soft-capping in attention and on the logits
    "gemma2": dict(
        folder="tests/fixtures/gemma2/tiny4",
        config="Gemma2Config", model="Gemma2ForCausalLM",
        args=dict(TINY, num_hidden_layers=4, sliding_window=8, layer_types=layer_types("sf", 4),
                  query_pre_attn_scalar=16, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
        window=8, pattern="sf", short=6, long=24, new_tokens=32,
        seed=6,  # picked from 0..9: smallest gap 4.5e-3, 19+ distinct tokens
        lift=["Gemma2OpenVINOConfig"],
    ),
    # gpt-oss: sliding and full alternate, attention sinks (an SDPA with a sixth input), MoE (4 experts, 2 per token)
    "gpt-oss": dict(
        folder="tests/fixtures/gpt-oss/tiny4",
        config="GptOssConfig", model="GptOssForCausalLM",
        args=dict(TINY, num_hidden_layers=4, sliding_window=8, layer_types=layer_types("sf", 4),
                  num_local_experts=4, num_experts_per_tok=2),
        window=8, pattern="sf", short=6, long=24, new_tokens=32,
        seed=4,  # picked from 0..11 for the smallest top1-top2 gap over both prompts (6.3e-3) with 21+ distinct tokens
    ),
    # Cohere2 (Command R7B): 3 sliding layers to 1 full, LayerNorm, parallel attention and MLP, logit scale
    "cohere2": dict(
        folder="tests/fixtures/cohere2/tiny4",
        config="Cohere2Config", model="Cohere2ForCausalLM",
        # logit_scale 1 (Command R7B: 0.25): the default 0.0625 shrinks the tiny model's logit gaps 16-fold
        args=dict(TINY, num_hidden_layers=4, sliding_window=8, layer_types=layer_types("sssf", 4), logit_scale=1.0),
        window=8, pattern="sssf", short=6, long=24, new_tokens=32,
        seed=2,  # picked from 0..9: smallest gap 5.3e-3, 26+ distinct tokens
    ),
    # EXAONE 4 (32B's layout): 3 sliding layers to 1 full
    "exaone4": dict(
        folder="tests/fixtures/exaone4/tiny4",
        config="Exaone4Config", model="Exaone4ForCausalLM",
        args=dict(TINY, num_hidden_layers=4, sliding_window=8, layer_types=layer_types("sssf", 4)),
        window=8, pattern="sssf", short=6, long=24, new_tokens=32,
        seed=0,  # picked from 0..9: smallest gap 7.1e-3, 24+ distinct tokens
        lift=["Exaone4OpenVINOConfig"],
    ),
    # Gemma 3 image-text-to-text (Gemma3ForConditionalGeneration, as gemma-3-4b-it is exported): gemma3-text's
    # decoder under a 1-layer SigLIP tower (16x16 images, 4-pixel patches, pooled to 4 image tokens)
    "gemma3-vlm": dict(
        folder="tests/fixtures/gemma3/vlm6",
        kind="gemma3_vlm", config="Gemma3Config", model="Gemma3ForConditionalGeneration",
        task="image-text-to-text",
        args=dict(TINY, num_hidden_layers=6, sliding_window=8, layer_types=layer_types("sssssf", 6),
                  query_pre_attn_scalar=16, final_logit_softcapping=30.0),
        vision=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    image_size=16, patch_size=4, initializer_range=0.08),
        mm_tokens_per_image=4,
        # short: 1 word, 7 tokens after the chat template (< W); long: 11 words, 17 tokens; image: 15 tokens
        window=8, pattern="sssssf", short=2, long=12, new_tokens=32, seed=0,
    ),
}

GEMMA3_SPECIAL = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
GEMMA3_TURN_TOKENS = ("<start_of_turn>", "<end_of_turn>")
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<start_of_image>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def is_vlm(fam: dict[str, Any]) -> bool:
    return fam.get("kind") == "gemma3_vlm"


def tokenizer_of(fam: dict[str, Any]):
    """The made-up WordLevel tokenizer; for the Gemma 3 VLM with Gemma 3's turn and image tokens (genai's
    InputsEmbedderGemma3 looks them up by these strings) and role words."""
    if is_vlm(fam):
        return core.build_tokenizer(fam["args"]["vocab_size"],
                                    special=list(GEMMA3_TURN_TOKENS) + list(GEMMA3_SPECIAL.values()),
                                    words=list(core.ROLE_WORDS), named=dict(GEMMA3_SPECIAL),
                                    chat_template=GEMMA3_CHAT_TEMPLATE)
    return core.build_tokenizer(fam["args"]["vocab_size"], chat_template=GENERIC_CHAT_TEMPLATE)


def first_word(fam: dict[str, Any]) -> int:
    vlm_tokens = len(GEMMA3_TURN_TOKENS) + len(GEMMA3_SPECIAL) + len(core.ROLE_WORDS)
    return core.NUM_SPECIAL + (vlm_tokens if is_vlm(fam) else 0)


def lift_transformers_bound(class_names: list[str]) -> None:
    """optimum-intel 2.2.0 caps these families' transformers version below the 5.5.4 that Gemma 4 needs:
    Gemma 2 and Gemma 3 text inherit GemmaOpenVINOConfig's MAX_TRANSFORMERS_VERSION 5.0, EXAONE 4 declares
    4.57.6. The bound is the only thing in the way (the trace and the tokens are checked after): lift it on
    the family's config class only."""
    from optimum.exporters.openvino import model_configs

    for name in class_names:
        cls = getattr(model_configs, name)
        core.log(f"note: lifting MAX_TRANSFORMERS_VERSION={cls.MAX_TRANSFORMERS_VERSION} of {name}")
        cls.MAX_TRANSFORMERS_VERSION = None


def build(fam: dict[str, Any], tok=None):
    import torch
    import transformers

    if is_vlm(fam):
        ids = {k: tok.convert_tokens_to_ids(v) for k, v in GEMMA3_SPECIAL.items()}
        text = transformers.Gemma3TextConfig(**fam["args"])
        config = transformers.Gemma3Config(
            text_config=text, vision_config=transformers.SiglipVisionConfig(**fam["vision"]),
            mm_tokens_per_image=fam["mm_tokens_per_image"], boi_token_index=ids["boi_token"],
            eoi_token_index=ids["eoi_token"], image_token_index=ids["image_token"],
            initializer_range=fam["args"]["initializer_range"], tie_word_embeddings=False,
            architectures=[fam["model"]])
    else:
        config = getattr(transformers, fam["config"])(**fam["args"], architectures=[fam["model"]])
    torch.manual_seed(fam["seed"])
    model = getattr(transformers, fam["model"])(config).eval().to(torch.float32)
    gen = torch.Generator().manual_seed(fam["seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # norm scales start at exactly 1 (or 0 for Gemma's 1 + w): jitter them so that a rewrite that
            # drops or swaps one changes the output
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        # special tokens' logits near 0: greedy decoding never picks eos, bos or pad
        model.get_input_embeddings().weight[: first_word(fam)] *= 0.05
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            out.weight[: first_word(fam)] *= 0.05
    gc = model.generation_config
    gc.eos_token_id, gc.bos_token_id, gc.pad_token_id, gc.do_sample = core.EOS_ID, core.BOS_ID, core.PAD_ID, False
    return config, model


def layer_layout(model, fam: dict[str, Any]) -> list[dict[str, Any]]:
    """Per decoder layer, the window transformers applies (read from its config's layer_types, or the
    model-wide sliding_window where the family has no layer_types)."""
    cfg = model.config.get_text_config()
    types = getattr(cfg, "layer_types", None) or [SLIDING if cfg.sliding_window else FULL] * cfg.num_hidden_layers
    return [{"layer": i, "attention_type": t, "sliding_window": cfg.sliding_window if t == SLIDING else None}
            for i, t in enumerate(types)]


def vlm_processor(fam: dict[str, Any], tok):
    """Gemma3Processor over the PIL image processor (the fast one needs torchvision, which does not load
    against torch 2.13.0+cpu here: see export_gemma4.py), images kept at their size, no pan and scan."""
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    size = fam["vision"]["image_size"]
    images = Gemma3ImageProcessorPil(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                     do_pan_and_scan=False)
    return Gemma3Processor(images, tok, chat_template=GEMMA3_CHAT_TEMPLATE, image_seq_length=fam["mm_tokens_per_image"])


def references(fam: dict[str, Any], model, tok, processor) -> dict[str, dict[str, Any]]:
    """transformers' greedy tokens: ``short`` (a prompt shorter than W), ``long`` (longer than W) and, for
    the VLM, ``image`` (the chat-templated words after the reference image). Causal LMs get token ids; the
    VLM gets a user message (``prompt_text``, what VLMPipeline takes) and its chat-templated ids."""
    vocab, n = fam["args"]["vocab_size"], fam["new_tokens"]
    refs = {}
    for key in ("short", "long"):
        ids = core.default_prompt_ids(vocab, fam[key], first_word_id=first_word(fam))
        if is_vlm(fam):
            text = core.words_text(ids[1:])
            chat = tok.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": text}]}],
                                           tokenize=False, add_generation_prompt=True)
            ids = tok(chat, add_special_tokens=False).input_ids
            refs[key] = dict(prompt_text=text, chat_prompt=chat, prompt_ids=ids,
                             **core.greedy_reference(model, ids, n, first_word(fam)))
        else:
            refs[key] = dict(prompt_ids=ids, **core.greedy_reference(model, ids, n, first_word(fam)))
    if is_vlm(fam):
        from PIL import Image

        image = core.reference_image(fam["vision"]["image_size"])
        text = refs["short"]["prompt_text"]
        chat = tok.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}],
            tokenize=False, add_generation_prompt=True)
        inputs = processor(text=chat, images=Image.fromarray(image), return_tensors="pt")
        ids = inputs["input_ids"][0].tolist()
        refs["image"] = dict(prompt_text=GEMMA3_SPECIAL["boi_token"] + text, chat_prompt=chat, prompt_ids=ids,
                             image={"file": core.REFERENCE_IMAGE_FILE, "shape": list(image.shape), "dtype": "uint8",
                                    "content": core.REFERENCE_IMAGE_CONTENT},
                             num_image_tokens=fam["mm_tokens_per_image"],
                             **image_greedy_reference(model, inputs, n, first_word(fam)))
    for key, ref in refs.items():
        core.log(f"{key} prompt ({len(ref['prompt_ids'])} tokens): {ref['generated_ids']} "
                 f"(min margin {min(ref['top1_top2_logit_margin']):.3g})")
    return refs


def image_greedy_reference(model, inputs, n: int, first: int) -> dict[str, Any]:
    """Greedy tokens after an image prompt: generate with the processor's pixel values and token types
    (Gemma 3's image tokens attend each other both ways), then one forward pass over the whole sequence
    (token types padded with text) must pick the same tokens."""
    import torch

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=0, do_sample=False, num_beams=1,
                             output_scores=True, return_dict_in_generate=True, eos_token_id=core.EOS_ID,
                             pad_token_id=core.PAD_ID)
        prompt_len = inputs["input_ids"].shape[1]
        gen = out.sequences[0, prompt_len:].tolist()
        margins = [float(v[0] - v[1]) for v in (torch.topk(sc[0].float(), 2).values for sc in out.scores)]
        seq = out.sequences
        types = torch.zeros_like(seq)
        types[:, :prompt_len] = inputs["token_type_ids"]
        logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), pixel_values=inputs["pixel_values"],
                       token_type_ids=types, use_cache=True).logits[0]
    whole = logits[prompt_len - 1: -1].argmax(-1).tolist()
    if len(gen) != n or any(t < first for t in gen):
        raise RuntimeError(f"image prompt: greedy generation stopped or picked a special token: {gen}")
    if whole != gen:
        raise RuntimeError(f"image prompt: step-by-step and whole-sequence greedy disagree: {gen} vs {whole}")
    return {"generated_ids": gen, "top1_top2_logit_margin": margins}


def export(name: str, out_dir: Path, work: Path | None) -> Path:
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fam = FAMILIES[name]
    tok = tokenizer_of(fam)
    config, model = build(fam, tok)
    layout = layer_layout(model, fam)
    core.log(f"{name}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, "
             f"layers {''.join('s' if e['attention_type'] == SLIDING else 'f' for e in layout)}, W={fam['window']}")
    processor = vlm_processor(fam, tok) if is_vlm(fam) else None
    refs = references(fam, model, tok, processor)

    work_root, ov_tmp = optimum_export(model, tok, fam, work, "families_export_", processor)
    if processor is not None and not (ov_tmp / "preprocessor_config.json").exists():
        # transformers 5 saves the processor as processor_config.json with the image keys nested, and optimum
        # writes only that; genai 2026.4.1's VLMPipeline reads the image size from preprocessor_config.json
        # (without it it resizes to its default and the vision IR fails: "Eltwise shape infer input shapes
        # dim index: 1 mismatch"), as the real checkpoint and older exports have it
        shutil.copy(work_root / "hf" / "preprocessor_config.json", ov_tmp / "preprocessor_config.json")
    check_exported(ov_tmp, "openvino_language_model.xml" if is_vlm(fam) else "openvino_model.xml", tok)

    reference = {
        "description": f"Tiny random-weight {fam['model']} exported by tools/export_families.py --family {name}",
        "family": name,
        "seed": fam["seed"],
        "command": f"python tools/export_families.py --family {name} --out <dir>",
        "runtime_note": "generated_ids are fp32 transformers greedy tokens; compare on CPU with "
                        "ovpasses.precision.EXACT_CPU_CONFIG",
        "sliding_window": fam["window"],
        "config": json.loads(config.to_json_string(use_diff=False)),
        "layers": layout,
        # the schema of export_gemma4.py's references (tests/test_fixtures.py reads it): here every layer owns
        # its cache, numbered by layer in the IR
        "kv_sharing": {
            "num_kv_shared_layers": 0, "first_kv_shared_layer": len(layout),
            "cache_owners": [e["layer"] for e in layout], "borrowers": {},
            "layers": [{"layer": e["layer"], "attention_type": e["attention_type"], "kv": "own",
                        "kv_source_layer": e["layer"], "ir_cache_slot": e["layer"],
                        "ir_cache_inputs": [f"past_key_values.{e['layer']}.key", f"past_key_values.{e['layer']}.value"]}
                       for e in layout],
            "source": f"{fam['model']} has no KV sharing",
        },
        **refs["short"],
        "max_new_tokens": fam["new_tokens"],
        "long_prompt": refs["long"],
        **({"image_prompt": refs["image"]} if "image" in refs else {}),
        "eos_token_id": core.EOS_ID,
        "ir": {p.name: core.describe_ir(p) for p in sorted(ov_tmp.glob("openvino_*model.xml"))},
        "versions": core.versions(),
    }
    (ov_tmp / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    if "image" in refs:
        import numpy as np

        np.save(ov_tmp / core.REFERENCE_IMAGE_FILE, core.reference_image(fam["vision"]["image_size"]))
    return write_fixture(ov_tmp, out_dir, work, work_root)


def optimum_export(model, tok, fam: dict[str, Any], work: Path | None, prefix: str, processor=None) -> tuple[Path, Path]:
    """Save the transformers model (and tokenizer or processor) and export it with optimum-intel's
    ``main_export`` (stateful, fp32, the family's task and lifted bound): (the scratch root, the export folder)."""
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    work_root = Path(work or tempfile.mkdtemp(prefix=prefix)).resolve()
    hf_dir, ov_tmp = work_root / "hf", work_root / "ov"
    for d in (hf_dir, ov_tmp):
        shutil.rmtree(d, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    (processor or tok).save_pretrained(hf_dir)
    if processor is not None:   # preprocessor_config.json as the real checkpoint has it (genai reads it)
        processor.image_processor.save_pretrained(hf_dir)
    task = fam.get("task", "text-generation-with-past")
    core.log(f"exporting with optimum-intel ({task}, stateful, fp32) ...")
    lift_transformers_bound(fam.get("lift", []))
    main_export(model_name_or_path=str(hf_dir), output=str(ov_tmp), task=task, framework="pt", stateful=True,
                ov_config=OVConfig(dtype="fp32"), convert_tokenizer=True, library_name="transformers",
                local_files_only=True, **fam.get("export_kwargs", {}))
    return work_root, ov_tmp


def check_exported(ov_tmp: Path, main_xml: str, tok) -> None:
    """The export wrote its decoder IR; the tokenizer IRs are converted here where optimum did not write them."""
    if not (ov_tmp / main_xml).exists():
        core.die(f"optimum-intel did not write {main_xml}")
    if not (ov_tmp / "openvino_tokenizer.xml").exists():
        import openvino as ov
        from openvino_tokenizers import convert_tokenizer

        ov_tok, ov_detok = convert_tokenizer(tok, with_detokenizer=True)
        ov.save_model(ov_tok, ov_tmp / "openvino_tokenizer.xml")
        ov.save_model(ov_detok, ov_tmp / "openvino_detokenizer.xml")


def write_fixture(ov_tmp: Path, out_dir: Path, work: Path | None, work_root: Path) -> Path:
    """Keep the files a fixture holds (``KEEP_FILES``), replace ``out_dir`` with them and drop the scratch root."""
    for p in sorted(ov_tmp.iterdir()):
        if p.name not in core.KEEP_FILES:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ov_tmp, out_dir)
    if work is None:
        shutil.rmtree(work_root, ignore_errors=True)
    core.log(f"wrote {out_dir} ({sum(p.stat().st_size for p in out_dir.iterdir()) / 1e6:.2f} MB)")
    return out_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=sorted(FAMILIES))
    p.add_argument("--out", help="output folder (replaced); default: the family's fixture folder")
    p.add_argument("--work-dir", help="scratch folder, kept (default: a temporary one, removed)")
    p.add_argument("--list", action="store_true", help="the families and their folders")
    args = p.parse_args(argv)
    if args.list or not args.family:
        for name, fam in FAMILIES.items():
            print(f"{name:22s} {fam['folder']:40s} W={fam['window']} layers {fam['pattern']}")
        return 0
    if os.environ.get("PYTHONHASHSEED") != "0" and argv is None:
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, PYTHONHASHSEED="0"))
    root = Path(__file__).resolve().parent.parent
    export(args.family, Path(args.out or root / FAMILIES[args.family]["folder"]).resolve(),
           Path(args.work_dir) if args.work_dir else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
