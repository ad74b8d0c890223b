#!/usr/bin/env python3
"""Build tiny random-weight models of the hybrid families (recurrent or convolutional layers beside attention,
chunked attention, pure SSM) and export them to OpenVINO IR, as ``optimum-cli export openvino`` exports the
real ones.

A sibling of ``tools/export_families.py``: the made-up WordLevel tokenizer, transformers' greedy reference and
its checks, the IR description and the tool versions are ``tools/export_gemma4.py``'s; the model builder (seeded
weights, jittered norm scales, quiet special tokens), the chat template and the bound lift are
``export_families.py``'s. This script adds one entry per family to :data:`FAMILIES`: the transformers version it
exports under and why, the config and model class, the tiny widths and the layer layout. Every model is exported
by optimum-intel's own ``main_export`` (stateful, ``text-generation-with-past``, fp32 weights) and its tokenizer
converted by openvino_tokenizers. ``reference.json`` holds transformers' greedy tokens after a short prompt
(``prompt_ids`` / ``generated_ids``) and after one longer than any chunk or window (``long_prompt``), the layer
kinds (``layers``), the IR's states with their ranks and shapes (``states``), the config and the versions::

    bash tools/venv.sh export-tf5.3.0
    .venvs/export-tf5.3.0/bin/python tools/export_hybrids.py --family qwen3_5 [--out DIR]

Each family names the transformers version it needs (``--list`` prints them with the venv to use); the script
refuses a family under another version in one line. ``--scan-seeds 0-15`` prints, per seed, the smallest
top1-top2 logit gap and the distinct-token counts of both prompts without exporting (how the seeds were picked).
Re-running gives the same bytes (the script re-executes itself with PYTHONHASHSEED=0, as export_gemma4.py does).

Workarounds, each with its cause, are comments beside the code that makes them (the transformers bounds of
optimum-intel 2.2.0 on Qwen3.5, Zamba2 and Llama 4 text); what each fixture holds and how its clients decode it:
``tests/fixtures/HYBRIDS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_families as families  # noqa: E402  - the builder, the chat template, the bound lift
import export_gemma4 as core  # noqa: E402  - the shared tokenizer, reference and IR helpers

# What every family shares where its config has the field: export_families.TINY's widths (hidden 64,
# vocabulary 512, weights with std 0.08, untied LM head, the made-up tokenizer's special ids).
BASE = {k: families.TINY[k] for k in ("vocab_size", "hidden_size", "initializer_range", "tie_word_embeddings",
                                      "pad_token_id", "eos_token_id", "bos_token_id")}
# Attention widths of the families with ordinary attention layers: 4 query heads on 2 KV heads of 16.
ATTENTION = {k: families.TINY[k] for k in ("intermediate_size", "num_attention_heads", "num_key_value_heads",
                                           "max_position_embeddings")}

# Zamba2's Mamba-2 chunk (its config's default: 256). The traced scan pads every call to a whole chunk and works on
# chunk x chunk matrices: at 256 a decode step of the 64-wide fixture took 87 ms at f32 under the CPU plugin,
# Multiply and ReduceSum over the chunk 94% of it (PERF_COUNT, 2026-12-07), 20-90x the other fixtures' steps; at 8,
# 4 ms, and the 24-token prompt spans three chunks, so the scan's carry from chunk to chunk is traced too. Granite
# 4's export holds no chunk (its IR is the same at 8 and 256, measured).
ZAMBA2_CHUNK = 8

TF_5_3, TF_4_57, TF_5_5 = "5.3.0", "4.57.6", "5.5.4"
VENV = {TF_5_3: "export-tf5.3.0", TF_4_57: "export-tf4.57.6", TF_5_5: "export"}

# family -> how to build it. ``transformers``: the version it exports under (the comment above it says why);
# ``config``/``model``: transformers classes and ``args``; ``kinds``: the config field that lists the layer kinds
# (None: every layer is ``mamba``); ``short``/``long``: prompt lengths; ``new_tokens``: greedy tokens recorded;
# ``seed``: picked with --scan-seeds; ``lift``: optimum-intel config classes whose transformers bound is lifted.
FAMILIES: dict[str, dict[str, Any]] = {
    # Qwen3.5 text: Gated DeltaNet linear attention on 3 of 4 layers (a causal conv and a delta-rule scan), full
    # attention (gated output, partial rotary) every 4th.
    "qwen3_5": dict(
        folder="tests/fixtures/qwen3_5/tiny4", model_type="qwen3_5_text",
        # optimum-intel 2.2.0's Qwen3_5ModelPatcher imports Qwen3_5DynamicCache, which transformers 5.5.4 no
        # longer has; 4.57.6 has no Qwen3.5 (new in 5.2)
        transformers=TF_5_3,
        config="Qwen3_5TextConfig", model="Qwen3_5ForCausalLM",
        args=dict(BASE, **ATTENTION, num_hidden_layers=4, head_dim=16,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4),
        kinds="layer_types", short=6, long=24, new_tokens=32,
        seed=6,  # picked from 0..15: smallest top1-top2 gap 1.05e-2 over both prompts, 30+ distinct tokens
        # optimum-intel 2.2.0's Qwen3_5TextOpenVINOConfig declares MIN 5.2.0 and MAX_TRANSFORMERS_VERSION 5.2.99;
        # under 5.3.0 the bound is the only thing in the way (ov.Core and genai decode transformers' tokens)
        lift=["Qwen3_5TextOpenVINOConfig"],
    ),
    # Qwen3-Next: Qwen3.5's layer layout with a sparse MoE block (4 experts, 2 per token, a gated shared expert)
    "qwen3_next": dict(
        folder="tests/fixtures/qwen3_next/tiny4", model_type="qwen3_next",
        # optimum-intel 2.2.0's Qwen3NextModelPatcher follows 4.57's MoE block (a ModuleList of experts: it reads
        # block.num_experts and experts[i].down_proj); 5.3.0's block holds the experts fused (Qwen3NextExperts),
        # so the patcher fails with "'Qwen3NextSparseMoeBlock' object has no attribute 'num_experts'" (measured
        # with the bound lifted); under 5.5.4 it fails earlier, importing Qwen3NextDynamicCache, which 5.5.4 no
        # longer has. 4.57.6 is also the bound optimum-intel declares; it needs huggingface_hub below 1.0.
        transformers=TF_4_57,
        config="Qwen3NextConfig", model="Qwen3NextForCausalLM",
        args=dict(BASE, **ATTENTION, num_hidden_layers=4, head_dim=16,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_num_key_heads=2, linear_num_value_heads=4,
                  num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                  decoder_sparse_step=1),
        kinds="layer_types", short=6, long=24, new_tokens=32,
        seed=8,  # picked from 0..15: smallest gap 1.33e-2, 29+ distinct tokens
    ),
    # LFM2: gated short convolutions (kernel 3) beside attention; here conv, conv, attention, conv, so that
    # conv states sit both before and after the attention layer
    "lfm2": dict(
        folder="tests/fixtures/lfm2/tiny4", model_type="lfm2",
        # optimum-intel 2.2.0's Lfm2ModelPatcher imports Lfm2HybridConvCache, which transformers 5.5.4 no longer
        # has (LFM2OpenVINOConfig declares MAX_TRANSFORMERS_VERSION 5.4.0: no lift)
        transformers=TF_5_3,
        config="Lfm2Config", model="Lfm2ForCausalLM",
        # block_auto_adjust_ff_dim=False keeps the MLP at 128 (the default rounds 2/3 of it up to a multiple of 256)
        args=dict(BASE, **ATTENTION, num_hidden_layers=4, layer_types=["conv", "conv", "full_attention", "conv"],
                  conv_L_cache=3, block_auto_adjust_ff_dim=False),
        kinds="layer_types", short=6, long=24, new_tokens=32,
        seed=4,  # picked from 0..15: smallest gap 1.39e-2, 30+ distinct tokens
    ),
    # Granite 4.0 hybrid: Mamba-2 layers beside attention, MoE (4 experts, 2 per token) and a shared MLP; here
    # mamba, mamba, attention, mamba
    "granite4": dict(
        folder="tests/fixtures/granite4/tiny4", model_type="granitemoehybrid",
        # optimum-intel 2.2.0's GraniteMoeHybridOpenVINOConfig declares MIN_TRANSFORMERS_VERSION 5.5.0 (and lifts
        # the 5.3.0 bound it would inherit from MambaOpenVINOConfig)
        transformers=TF_5_5,
        config="GraniteMoeHybridConfig", model="GraniteMoeHybridForCausalLM",
        # experts of 64 (the shared MLP too): with ATTENTION's 128 the folder is 3.2 MB
        args=dict(BASE, **dict(ATTENTION, intermediate_size=64), num_hidden_layers=4,
                  layer_types=["mamba", "mamba", "attention", "mamba"],
                  mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1, mamba_d_state=16, mamba_d_conv=4,
                  mamba_expand=2, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=64),
        kinds="layer_types", short=6, long=24, new_tokens=32,
        seed=4,  # picked from 0..15: smallest gap 1.62e-2, 30+ distinct tokens
    ),
    # Zamba2: Mamba-2 layers; "hybrid" layers run one shared attention block (on the hidden state concatenated
    # with the embeddings, so heads of 2 * 64 / 4 = 32) before their Mamba-2 layer. Two hybrid layers of 4 share
    # the one block (num_mem_blocks=1), each with its own KV cache.
    "zamba2": dict(
        folder="tests/fixtures/zamba2/tiny", model_type="zamba2",
        # optimum-intel 2.2.0's Zamba2ModelPatcher imports Zamba2HybridDynamicCache, which transformers 5.5.4 no
        # longer has; under 4.57.6 (the bound optimum-intel declares) save_pretrained already fails: its Zamba2
        # shares the shared block's tensors between the hybrid layers without declaring them ("The weights trying
        # to be saved contained shared tensors ...", measured)
        transformers=TF_5_3,
        config="Zamba2Config", model="Zamba2ForCausalLM",
        # use_mem_rope=True: rotary positions in the shared attention, as the real Zamba2 configs have it.
        # KV heads = heads: optimum-intel 2.2.0's Zamba2DummyPastKeyValuesGenerator shapes the traced KV cache with
        # num_attention_heads (its Granite branch takes num_key_value_heads), as the real configs have them
        args=dict(BASE, num_hidden_layers=4, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
                  intermediate_size=128, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                  mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, n_mamba_heads=4, mamba_ngroups=1,
                  num_mem_blocks=1, adapter_rank=8, use_mem_rope=True, chunk_size=ZAMBA2_CHUNK),
        kinds="layers_block_type", short=6, long=24, new_tokens=32,
        seed=4,  # picked from 0..15: smallest gap 1.33e-2, 27+ distinct tokens
        # optimum-intel 2.2.0's Zamba2OpenVINOConfig declares MAX_TRANSFORMERS_VERSION 4.57.6 (a
        # MIN_TRANSFORMERS_VERSION 5.2.0 is commented out beside it); under 5.3.0 the bound is the only thing in
        # the way: the export traces and ov.Core and genai's stateful path decode transformers' tokens
        lift=["Zamba2OpenVINOConfig"],
    ),
    # Llama 4 text: chunked attention (attention_chunk_size=8, rotary) on 3 of 4 layers, global attention without
    # positions (NoPE, with attention temperature tuning) every 4th; QK norm; MoE (4 experts, top 1, shared expert)
    "llama4": dict(
        folder="tests/fixtures/llama4/tiny4", model_type="llama4_text",
        # 5.5.4 fails the trace: its attention temperature tuning reads cache_position, which reaches the
        # attention as None under optimum-intel 2.2.0's patcher ("'NoneType' object has no attribute 'float'",
        # measured). 4.57.6, the bound optimum-intel declares, exports too, with the same tokens and IR inputs
        # and states (measured); 5.3.0 keeps Llama 4 in the venv of the other transformers-5 families
        transformers=TF_5_3,
        config="Llama4TextConfig", model="Llama4ForCausalLM",
        args=dict(BASE, **ATTENTION, num_hidden_layers=4, head_dim=16, intermediate_size_mlp=128,
                  num_local_experts=4, num_experts_per_tok=1, attention_chunk_size=8),
        kinds="layer_types", short=6, long=24, new_tokens=32,
        seed=3,  # picked from 0..15: smallest gap 2.46e-3, 22+ distinct tokens (the tiny MoE repeats more)
        # optimum-intel 2.2.0's Llama4TextOpenVINOConfig declares MAX_TRANSFORMERS_VERSION 4.57.6; under 5.3.0
        # the bound is the only thing in the way (ov.Core and genai's stateful path decode transformers' tokens)
        lift=["Llama4TextOpenVINOConfig"],
    ),
    # Mamba: pure SSM (MambaForCausalLM), no attention. The export takes cache_position besides input_ids and
    # attention_mask. Here only as an IR that tools must refuse; its tokens are recorded all the same.
    "mamba": dict(
        folder="tests/fixtures/mamba/tiny", model_type="mamba",
        # optimum-intel 2.2.0's MambaOpenVINOConfig declares MAX_TRANSFORMERS_VERSION 5.3.0: the newest it takes
        transformers=TF_5_3,
        config="MambaConfig", model="MambaForCausalLM",
        args=dict(BASE, num_hidden_layers=4, state_size=16, expand=2, conv_kernel=4),
        kinds=None, short=6, long=24, new_tokens=32,
        seed=1,  # picked from 0..15: smallest gap 9.18e-3, 29+ distinct tokens
    ),
}


def venv_command(fam: dict[str, Any]) -> str:
    venv = VENV[fam["transformers"]]
    return f"bash tools/venv.sh {venv} && .venvs/{venv}/bin/python tools/export_hybrids.py"


def require_transformers(name: str) -> None:
    from importlib.metadata import version

    fam, have = FAMILIES[name], version("transformers")
    if have != fam["transformers"]:
        print(f"export_hybrids: error: {name} exports under transformers {fam['transformers']}, this python has "
              f"{have}: {venv_command(fam)} --family {name}", file=sys.stderr)
        sys.exit(2)


def layer_layout(model, fam: dict[str, Any]) -> list[dict[str, Any]]:
    """Per decoder layer, its kind as transformers' config names it (``linear_attention``, ``conv``, ``mamba``,
    ``hybrid``, ``chunked_attention``, ``full_attention``, ``attention``); for Llama 4 also the chunk and whether
    the layer applies rotary positions."""
    cfg = model.config
    kinds = list(getattr(cfg, fam["kinds"])) if fam["kinds"] else ["mamba"] * cfg.num_hidden_layers
    layout = [{"layer": i, "kind": k} for i, k in enumerate(kinds)]
    if cfg.model_type == "llama4_text":
        for e, rope in zip(layout, cfg.no_rope_layers):   # no_rope_layers[i] == 1: layer i *uses* rotary
            e["attention_chunk_size"] = cfg.attention_chunk_size if e["kind"] == "chunked_attention" else None
            e["rope"] = bool(rope)
    return layout


def letters(layout: list[dict[str, Any]]) -> str:
    """The layout in one letter a layer: l linear attention, c conv, m mamba, h hybrid (shared attention and
    mamba), k chunked attention, f full attention."""
    code = {"linear_attention": "l", "conv": "c", "mamba": "m", "hybrid": "h", "chunked_attention": "k",
            "full_attention": "f", "attention": "f"}
    return "".join(code[e["kind"]] for e in layout)


def describe_states(xml: Path) -> list[dict[str, Any]]:
    """The IR's ReadValue/Assign variables: id, rank and shape (as the variable declares it), sorted by id."""
    import openvino as ov

    m = ov.Core().read_model(xml)
    out = []
    for v in m.get_variables():
        info = v.get_info()
        shape = info.data_shape
        out.append({"id": info.variable_id, "rank": shape.rank.get_length() if shape.rank.is_static else None,
                    "shape": str(shape), "type": info.data_type.get_type_name()})
    return sorted(out, key=lambda s: s["id"])


def references(fam: dict[str, Any], model) -> dict[str, dict[str, Any]]:
    vocab, n = fam["args"]["vocab_size"], fam["new_tokens"]
    refs = {}
    for key in ("short", "long"):
        ids = core.default_prompt_ids(vocab, fam[key])
        refs[key] = dict(prompt_ids=ids, **core.greedy_reference(model, ids, n))
        core.log(f"{key} prompt ({len(ids)} tokens): {refs[key]['generated_ids']} "
                 f"(min margin {min(refs[key]['top1_top2_logit_margin']):.3g})")
    return refs


def unchunked_references(fam: dict[str, Any], model, refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Llama 4: transformers' greedy tokens after both prompts from the same weights with the chunk as long as
    the context (``attention_chunk_size`` = max_position_embeddings): what a client that ignores the chunking
    decodes. They part from the chunked tokens where a query first sits past the first chunk (position 8), so a
    client's tokens tell which model it ran."""
    import copy

    cfg = copy.deepcopy(model.config)
    cfg.attention_chunk_size = cfg.max_position_embeddings
    twin = type(model)(cfg).eval()
    twin.load_state_dict(model.state_dict())
    twin.generation_config = model.generation_config
    out: dict[str, Any] = {"attention_chunk_size": cfg.attention_chunk_size}
    for key, ref in refs.items():
        out[key] = core.greedy_reference(twin, ref["prompt_ids"], fam["new_tokens"])
        core.log(f"{key} prompt, chunking off: {out[key]['generated_ids']}")
    return out


def scan_seeds(name: str, seeds: list[int]) -> None:
    """Per seed: the smallest top1-top2 gap over both prompts and the distinct tokens of each (no export)."""
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for seed in seeds:
        fam = dict(FAMILIES[name], seed=seed)
        _, model = families.build(fam)
        try:
            refs = references(fam, model)
        except RuntimeError as e:
            print(f"seed {seed:3d}: {e}", flush=True)
            continue
        gap = min(min(r["top1_top2_logit_margin"]) for r in refs.values())
        print(f"seed {seed:3d}: smallest gap {gap:.2e}, distinct tokens "
              f"{len(set(refs['short']['generated_ids']))}/{len(set(refs['long']['generated_ids']))}", flush=True)


def export(name: str, out_dir: Path, work: Path | None) -> Path:
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fam = FAMILIES[name]
    tok = families.tokenizer_of(fam)
    config, model = families.build(fam, tok)
    layout = layer_layout(model, fam)
    core.log(f"{name}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} parameters, "
             f"layers {letters(layout)}")
    refs = references(fam, model)
    unchunked = unchunked_references(fam, model, refs) if fam["model_type"] == "llama4_text" else None

    work_root, ov_tmp = families.optimum_export(model, tok, fam, work, "hybrids_export_")
    xml = ov_tmp / "openvino_model.xml"
    families.check_exported(ov_tmp, xml.name, tok)

    reference = {
        "description": f"Tiny random-weight {fam['model']} exported by tools/export_hybrids.py --family {name}",
        "family": name,
        "model_type": fam["model_type"],
        "seed": fam["seed"],
        "command": f"python tools/export_hybrids.py --family {name} --out <dir>",
        "export_environment": f"bash tools/venv.sh {VENV[fam['transformers']]} (transformers {fam['transformers']})",
        "runtime_note": "generated_ids are fp32 transformers greedy tokens; compare on CPU with "
                        "ovpasses.precision.EXACT_CPU_CONFIG",
        "config": json.loads(config.to_json_string(use_diff=False)),
        "layers": layout,
        "layer_pattern": letters(layout),
        **refs["short"],
        "max_new_tokens": fam["new_tokens"],
        "long_prompt": refs["long"],
        **({"unchunked_reference": unchunked} if unchunked else {}),
        "eos_token_id": core.EOS_ID,
        "ir": core.describe_ir(xml),
        "states": describe_states(xml),
        "versions": core.versions(),
    }
    if all(st["id"].startswith("past_key_values.") for st in reference["states"]):
        # only KV caches (Llama 4): export_families.py's kv_sharing record (tests/test_fixtures.py reads it);
        # every layer owns its cache, numbered by layer in the IR
        reference["kv_sharing"] = {
            "num_kv_shared_layers": 0, "first_kv_shared_layer": len(layout),
            "cache_owners": [e["layer"] for e in layout], "borrowers": {},
            "layers": [{"layer": e["layer"], "attention_type": e["kind"], "kv": "own", "kv_source_layer": e["layer"],
                        "ir_cache_slot": e["layer"],
                        "ir_cache_inputs": [f"past_key_values.{e['layer']}.key", f"past_key_values.{e['layer']}.value"]}
                       for e in layout],
            "source": f"{fam['model']} has no KV sharing",
        }
    (ov_tmp / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    return families.write_fixture(ov_tmp, out_dir, work, work_root)


def seed_range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=sorted(FAMILIES))
    p.add_argument("--out", help="output folder (replaced); default: the family's fixture folder")
    p.add_argument("--work-dir", help="scratch folder, kept (default: a temporary one, removed)")
    p.add_argument("--scan-seeds", metavar="A-B", help="print each seed's smallest logit gap and distinct tokens")
    p.add_argument("--list", action="store_true", help="the families, their folders and export environments")
    args = p.parse_args(argv)
    if args.list or not args.family:
        for name, fam in FAMILIES.items():
            print(f"{name:11s} {fam['model_type']:17s} {fam['folder']:30s} transformers {fam['transformers']:7s} "
                  f"{venv_command(fam)} --family {name}")
        return 0
    require_transformers(args.family)
    if os.environ.get("PYTHONHASHSEED") != "0" and argv is None:
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, PYTHONHASHSEED="0"))
    if args.scan_seeds:
        scan_seeds(args.family, seed_range(args.scan_seeds))
        return 0
    root = Path(__file__).resolve().parent.parent
    export(args.family, Path(args.out or root / FAMILIES[args.family]["folder"]).resolve(),
           Path(args.work_dir) if args.work_dir else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
