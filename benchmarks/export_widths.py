"""Random-weight models with a real family's attention widths (few layers, small MLP and vocabulary), exported
stateful by optimum-intel for the sliding-window benchmarks (issue 32). The models are large: write them under
``out/`` (ignored), never into the repository.

    .venvs/export/bin/python benchmarks/export_widths.py --preset gemma3-4b --out out/gemma3-4b-widths
    .venvs/export/bin/python benchmarks/export_widths.py --preset gpt-oss-20b --out out/gpt-oss-20b-widths
    .venvs/export/bin/python benchmarks/export_widths.py --preset mistral-7b --out out/mistral-7b-widths
    .venvs/export/bin/python benchmarks/export_widths.py --preset gemma2-2b --out out/gemma2-2b-widths
    .venvs/export/bin/python benchmarks/export_widths.py --preset command-r7b --out out/command-r7b-widths
    .venvs/export/bin/python benchmarks/export_widths.py --preset exaone4-32b --out out/exaone4-32b-widths

Presets (the attention is the family's; the rest is cut down so that a 2-core machine measures it):

* ``gemma3-4b``: ``Gemma3ForCausalLM``, hidden 2560, 8 query heads x 256, 4 KV heads, window 1024, 12 layers
  5 sliding : 1 full, intermediate 1024, vocabulary 2048.
* ``gpt-oss-20b``: ``GptOssForCausalLM``, hidden 2880, 64 query heads x 64, 8 KV heads, window 128 with sinks,
  8 layers alternating sliding and full, 4 experts (2 per token) of intermediate 256, vocabulary 2048.
* ``mistral-7b``: ``MistralForCausalLM`` as Mistral 7B v0.1 shipped it, every layer sliding: hidden 4096, 32 query
  heads x 128, 8 KV heads, window 4096, 4 layers, intermediate 1024, vocabulary 2048 (no cache keeps the whole
  context: the trimmable form reads the past length from the attention_mask).
* ``gemma2-2b``: ``Gemma2ForCausalLM``, hidden 2304, 8 query heads x 256, 4 KV heads, window 4096, 8 layers
  alternating sliding and full, soft-capping as the model, intermediate 1024, vocabulary 2048.
* ``command-r7b``: ``Cohere2ForCausalLM`` (Command R7B): hidden 4096, 32 query heads x 128, 8 KV heads, window
  4096, 4 layers 3 sliding : 1 full, logit scale 0.25, intermediate 1024, vocabulary 2048.
* ``exaone4-32b``: ``Exaone4ForCausalLM`` (EXAONE 4.0 32B): hidden 5120, 40 query heads x 128, 8 KV heads, window
  4096, 4 layers 3 sliding : 1 full, intermediate 1024, vocabulary 2048.

Weights are f32 (``OVConfig(dtype="fp32")``, no compression), from a fixed seed; no tokenizer is converted
(the benchmarks feed token ids). Run it with the export venv (transformers 5.5.4, optimum-intel 2.2.0).
``--tiny``: the preset's family and layer pattern at toy widths (:data:`TINY`), for the tests' smoke run.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

PRESETS = {
    "gemma3-4b": dict(kind="gemma3_text", hidden_size=2560, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                      sliding_window=1024, num_hidden_layers=12, intermediate_size=1024, vocab_size=2048),
    "gpt-oss-20b": dict(kind="gpt_oss", hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                        sliding_window=128, num_hidden_layers=8, intermediate_size=256, vocab_size=2048,
                        num_local_experts=4, num_experts_per_tok=2),
    "gemma2-2b": dict(kind="gemma2", hidden_size=2304, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                      sliding_window=4096, num_hidden_layers=8, intermediate_size=1024, vocab_size=2048),
    "mistral-7b": dict(kind="mistral", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                       sliding_window=4096, num_hidden_layers=4, intermediate_size=1024, vocab_size=2048),
    "command-r7b": dict(kind="cohere2", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        sliding_window=4096, num_hidden_layers=4, intermediate_size=1024, vocab_size=2048,
                        logit_scale=0.25),
    "exaone4-32b": dict(kind="exaone4", hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                        sliding_window=4096, num_hidden_layers=4, intermediate_size=1024, vocab_size=2048),
}

# --tiny: toy widths over a preset (its family, layer count and pattern, and its extras such as experts stay)
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=16,
            intermediate_size=64, vocab_size=256)


def build(preset: str, tiny: bool = False):
    import torch

    s = dict(PRESETS[preset], **(TINY if tiny else {}))
    kind = s.pop("kind")
    torch.manual_seed(0)
    layers = s["num_hidden_layers"]
    if kind == "gemma3_text":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig
        types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
        config = Gemma3TextConfig(layer_types=types, query_pre_attn_scalar=s["head_dim"], max_position_embeddings=65536,
                                  **s)
        config.architectures = ["Gemma3ForCausalLM"]
        return Gemma3ForCausalLM(config).eval(), config
    if kind == "gemma2":    # Gemma 2 2B's attention: every other layer sliding (W = 4,096), soft-capping as the model
        from transformers import Gemma2Config, Gemma2ForCausalLM
        types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
        config = Gemma2Config(layer_types=types, query_pre_attn_scalar=s["head_dim"], max_position_embeddings=65536,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0, **s)
        config.architectures = ["Gemma2ForCausalLM"]
        return Gemma2ForCausalLM(config).eval(), config
    if kind in ("cohere2", "exaone4"):   # 3 sliding layers to 1 full, as Command R7B and EXAONE 4.0 32B
        import transformers
        types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(layers)]
        name = {"cohere2": "Cohere2", "exaone4": "Exaone4"}[kind]
        config = getattr(transformers, f"{name}Config")(layer_types=types, max_position_embeddings=65536, **s)
        config.architectures = [f"{name}ForCausalLM"]
        return getattr(transformers, f"{name}ForCausalLM")(config).eval(), config
    if kind == "mistral":   # transformers 5.5.4's MistralConfig has no layer_types: the window is every layer's
        from transformers import MistralConfig, MistralForCausalLM
        config = MistralConfig(max_position_embeddings=65536, **s)
        config.architectures = ["MistralForCausalLM"]
        return MistralForCausalLM(config).eval(), config
    from transformers import GptOssConfig, GptOssForCausalLM
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    config = GptOssConfig(layer_types=types, max_position_embeddings=65536, **s)
    config.architectures = ["GptOssForCausalLM"]
    model = GptOssForCausalLM(config).eval()
    with torch.no_grad():   # random sinks, so that the sinks input carries values
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 1.0)
    return model, config


def lift_transformers_bound() -> None:
    """optimum-intel 2.2.0's ``Gemma3TextOpenVINOConfig`` and ``Gemma2OpenVINOConfig`` inherit MAX_TRANSFORMERS_VERSION
    5.0 from ``GemmaOpenVINOConfig``, and ``Exaone4OpenVINOConfig`` declares 4.57.6: each refuses transformers 5.5.4
    for that alone (as ``tools/export_gemma4.py`` says of Gemma 4's config); lift the bound of those classes only."""
    from optimum.exporters.openvino import model_configs

    for cls in (model_configs.Gemma3TextOpenVINOConfig, model_configs.Gemma2OpenVINOConfig,
                model_configs.Exaone4OpenVINOConfig):
        cls.MAX_TRANSFORMERS_VERSION = None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=PRESETS, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true", help="toy widths (the tests' smoke run)")
    args = parser.parse_args(argv)
    import torch
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    torch.set_num_threads(1)
    lift_transformers_bound()
    model, config = build(args.preset, args.tiny)
    work = Path(tempfile.mkdtemp(prefix="export-widths-"))
    try:
        model.save_pretrained(work / "hf", safe_serialization=True)
        del model
        main_export(model_name_or_path=str(work / "hf"), output=str(work / "ov"), task="text-generation-with-past",
                    framework="pt", stateful=True, ov_config=OVConfig(dtype="fp32"), convert_tokenizer=False,
                    library_name="transformers", local_files_only=True, sequence_length=config.sliding_window)
        if args.out.exists():
            shutil.rmtree(args.out)
        shutil.copytree(work / "ov", args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"exported {args.preset} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
