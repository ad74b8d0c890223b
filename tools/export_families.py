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

    .venvs/export/bin/python tools/export_families.py --family mistral-allsliding --out tests/fixtures/mistral/allsliding

``--list`` prints the families and the folder each is committed in. Re-running gives the same bytes
(the script re-executes itself with PYTHONHASHSEED=0, as export_gemma4.py does).

Workarounds and failures, each with its cause, are in the family's ``notes``; ``--list`` shows them.
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
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=4096, initializer_range=0.08, tie_word_embeddings=True,
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
        args=dict(TINY, num_hidden_layers=4, sliding_window=8, tie_word_embeddings=False),
        window=8, pattern="s", short=6, long=24, new_tokens=32,
        seed=13,  # picked from 0..15 for the largest smallest top1-top2 gap over both prompts (5.3e-3), 21 distinct tokens
    ),
}


def build(fam: dict[str, Any]):
    import torch
    import transformers

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
        model.get_input_embeddings().weight[: core.NUM_SPECIAL] *= 0.05
        out = model.get_output_embeddings()
        if out is not None and out.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            out.weight[: core.NUM_SPECIAL] *= 0.05
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


def export(name: str, out_dir: Path, work: Path | None) -> Path:
    import torch
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fam = FAMILIES[name]
    tok = core.build_tokenizer(fam["args"]["vocab_size"], chat_template=GENERIC_CHAT_TEMPLATE)
    config, model = build(fam)
    layout = layer_layout(model, fam)
    core.log(f"{name}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, "
             f"layers {''.join('s' if e['attention_type'] == SLIDING else 'f' for e in layout)}, W={fam['window']}")
    refs = {}
    for key, length in (("short", fam["short"]), ("long", fam["long"])):
        ids = core.default_prompt_ids(fam["args"]["vocab_size"], length)
        refs[key] = dict(prompt_ids=ids, **core.greedy_reference(model, ids, fam["new_tokens"]))
        core.log(f"{key} prompt ({length} tokens): {refs[key]['generated_ids']} "
                 f"(min margin {min(refs[key]['top1_top2_logit_margin']):.3g})")

    work_root = Path(work or tempfile.mkdtemp(prefix="families_export_")).resolve()
    hf_dir, ov_tmp = work_root / "hf", work_root / "ov"
    for d in (hf_dir, ov_tmp):
        shutil.rmtree(d, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    tok.save_pretrained(hf_dir)
    task = fam.get("task", "text-generation-with-past")
    core.log(f"exporting with optimum-intel ({task}, stateful, fp32) ...")
    main_export(model_name_or_path=str(hf_dir), output=str(ov_tmp), task=task, framework="pt", stateful=True,
                ov_config=OVConfig(dtype="fp32"), convert_tokenizer=True, library_name="transformers",
                local_files_only=True, **fam.get("export_kwargs", {}))
    main_xml = ov_tmp / "openvino_model.xml"
    if not main_xml.exists():
        core.die(f"optimum-intel did not write {main_xml.name}")
    if not (ov_tmp / "openvino_tokenizer.xml").exists():
        import openvino as ov
        from openvino_tokenizers import convert_tokenizer

        ov_tok, ov_detok = convert_tokenizer(tok, with_detokenizer=True)
        ov.save_model(ov_tok, ov_tmp / "openvino_tokenizer.xml")
        ov.save_model(ov_detok, ov_tmp / "openvino_detokenizer.xml")

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
        "prompt_ids": refs["short"]["prompt_ids"],
        "max_new_tokens": fam["new_tokens"],
        "generated_ids": refs["short"]["generated_ids"],
        "top1_top2_logit_margin": refs["short"]["top1_top2_logit_margin"],
        "long_prompt": refs["long"],
        "eos_token_id": core.EOS_ID,
        "ir": core.describe_ir(main_xml),
        "versions": core.versions(),
    }
    (ov_tmp / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
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
    p.add_argument("--list", action="store_true", help="the families, their folders and notes")
    args = p.parse_args(argv)
    if args.list or not args.family:
        for name, fam in FAMILIES.items():
            print(f"{name:22s} {fam['folder']:40s} W={fam['window']} {fam.get('notes', '')}")
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
