"""``--sliding-window bounded`` on the sliding-window families beyond Gemma 4 (issue 30): Gemma 2, Gemma 3
(text and image-text-to-text), gpt-oss (attention sinks, MoE), Cohere2, EXAONE 4, and Mistral with a window on
every layer. The fixtures are tiny random-weight exports by optimum-intel (``tools/export_families.py``) with
W = 8; their reference.json holds transformers' 32 greedy tokens after a prompt shorter than W and one longer
(``long_prompt``), so every decode passes W four times or more.

A family is "bounded" when, after such a decode, every sliding layer's cache holds at most W - 1 positions,
and the greedy tokens equal the unmodified IR's and transformers', through ov.Core (whole and chunked
prefill, ``EXACT_CPU_CONFIG``), openvino_genai's stateful path (``ATTENTION_BACKEND="SDPA"``, chat included)
and its default paged path (which converts the states away: never worse than the unmodified folder).
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import ovpasses
from ovpasses.app import cli
from ovpasses.plan.runtimes import PAGED_WINDOW_NEEDS_SLICE, parse_release
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.greedy import genai_chat, greedy_generate, vlm_pipeline_tokens
from testkit.matrix import grid_cell

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
AFFECTED_PYTHON = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"
needs_affected = pytest.mark.skipif(not AFFECTED_PYTHON.exists(),
                                    reason="needs .venvs/ov-2026.0.0 (bash tools/venv.sh ov 2026.0.0)")

# fixture -> the marks of its bounded claims
TEXT_FIXTURES = {
    "mistral/allsliding": [],
    "gemma3/text6": [],
    "gemma2/tiny4": [],
    "gpt-oss/tiny4": [],
    "cohere2/tiny4": [],
    "exaone4/tiny4": [],
}
VLM = FIXTURES / "gemma3" / "vlm6"


def text_params():
    return [pytest.param(name, marks=marks, id=name.replace("/", "-")) for name, marks in TEXT_FIXTURES.items()]


@functools.cache
def reference(fixture: str) -> dict:
    return json.loads((FIXTURES / fixture / "reference.json").read_text())


def window(fixture: str) -> int:
    return reference(fixture)["sliding_window"]


def sliding_layers(fixture: str) -> set[int]:
    return {e["layer"] for e in reference(fixture)["layers"] if e["attention_type"] == "sliding_attention"}


@functools.cache
def bounded_model(fixture: str, margin: int = 0) -> ov.Model:
    model = ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    ovpasses.rewrite(model, sliding_window="bounded", sliding_window_margin=margin)
    return model


@functools.cache
def compiled(fixture: str, bounded: bool) -> ov.CompiledModel:
    model = bounded_model(fixture) if bounded else ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    return ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)


def bounded_layers(model: ov.Model | Path) -> set[int]:
    """The layers whose caches the rewritten ``model`` (or IR file) bounds, as its analysis says."""
    from ovpasses.analysis.kv_sharing import analyze_kv_sharing

    caches = analyze_kv_sharing(model if isinstance(model, ov.Model) else ov.Core().read_model(model)).caches
    return {int(v.split(".")[1]) for v, c in caches.items() if c.bounded}


def cache_lengths(request: ov.InferRequest) -> dict[int, int]:
    """Per layer, the positions its K cache holds (``past_key_values.<layer>.key...``)."""
    return {int(s.name.split(".")[1]): s.state.shape[2] for s in request.query_state() if ".key" in s.name}


def test_the_fixtures_have_the_layouts_they_stand_for():
    """W = 8 everywhere; the pattern of sliding and full layers of each family; prompts on both sides of W and
    decodes that pass it four times; the IR holds one cache per layer (no KV sharing in these families)."""
    patterns = {"mistral/allsliding": "ssss", "gemma3/text6": "sssssf", "gemma2/tiny4": "sfsf",
                "gpt-oss/tiny4": "sfsf", "cohere2/tiny4": "sssf", "exaone4/tiny4": "sssf"}
    for fixture, pattern in patterns.items():
        ref = reference(fixture)
        layers = ref["layers"]
        assert "".join("s" if e["attention_type"] == "sliding_attention" else "f" for e in layers) == pattern
        assert window(fixture) == 8 and {e["sliding_window"] for e in layers if e["sliding_window"]} == {8}
        assert len(ref["prompt_ids"]) < 8 < len(ref["long_prompt"]["prompt_ids"])
        assert len(ref["generated_ids"]) == len(ref["long_prompt"]["generated_ids"]) >= 4 * 8
        states = ref["ir"]["openvino_model.xml"]["states"]
        assert len(states) == 2 * len(layers)
    sinks = [n for n in ov.Core().read_model(FIXTURES / "gpt-oss/tiny4/openvino_model.xml").get_ordered_ops()
             if n.get_type_name() == "ScaledDotProductAttention"]
    assert len(sinks) == 4 and all(n.get_input_size() == 6 for n in sinks)   # gpt-oss: the sinks are SDPA's 6th input


@pytest.mark.parametrize("fixture", text_params())
@pytest.mark.parametrize("prompt,chunk", [("default", None), ("long", None), ("long", 5), ("long", 3)])
def test_core_bounded_caches_hold_the_window_and_decode_transformers_tokens(fixture, prompt, chunk):
    """ov.Core (EXACT_CPU_CONFIG): the prompt whole or in chunks smaller than W, 32 tokens decoded; the tokens
    equal transformers' and the unmodified IR's (fed the same way), and each sliding layer's cache holds at
    most W - 1 positions at the end while a full layer's holds the whole context."""
    ref = reference(fixture)
    case = ref if prompt == "default" else ref["long_prompt"]
    request = compiled(fixture, True).create_infer_request()
    tokens = greedy_generate(compiled(fixture, True), case["prompt_ids"], len(case["generated_ids"]),
                             prefill_chunk=chunk, request=request)
    unmodified = greedy_generate(compiled(fixture, False), case["prompt_ids"], len(case["generated_ids"]),
                                 prefill_chunk=chunk)
    assert unmodified == case["generated_ids"]
    assert tokens == case["generated_ids"]
    context = len(case["prompt_ids"]) + len(case["generated_ids"]) - 1
    lengths = cache_lengths(request)
    sliding = sliding_layers(fixture)
    assert {layer: n for layer, n in lengths.items() if layer not in sliding} == \
        {layer: context for layer in lengths if layer not in sliding}
    assert max(lengths[layer] for layer in sliding) <= window(fixture) - 1, lengths


@pytest.mark.parametrize("fixture", text_params())
def test_the_analysis_of_the_rewritten_model_says_every_sliding_cache_is_bounded(fixture):
    """Every sliding layer's caches (K and V) bounded, no full layer's (the all-sliding model's too: its past
    length is taken from attention_mask)."""
    assert bounded_layers(bounded_model(fixture)) == sliding_layers(fixture)


# "paged": LLMPipeline with a SchedulerConfig; "default": LLMPipeline as users call it (its default backend is the
# paged one on 2026.0 and 2026.4.1: measured, the unmodified folder's window is lost on 2026.0 there too)
CLIENT_MODES, CLIENT_PATHS = ("unmodified", "bounded"), ("core", "stateful", "paged", "default")


def client_cell(python: Path, fixture: str, mode: str, path: str, prompt: str) -> dict:
    return grid_cell(python, FIXTURES / fixture, mode, path, prompt, modes=CLIENT_MODES, paths=CLIENT_PATHS)


# 2026.0 in the default run for the sinks (gpt-oss); the other families in the slow tier. On the newest runtime
# cohere2 and exaone4 too (plain SDPAs in gemma3's layout of sliding and full layers, 3:1 and 5:1): their ov.Core
# tokens stay in the default run (test_core_bounded_caches_hold_the_window_and_decode_transformers_tokens), gemma2's
# soft-capped attention (left eager) and gpt-oss's sinks are each the only ones of their kind
DEFAULT_ON_2026_0 = ("gpt-oss/tiny4",)
SLOW_ON_NEWEST = ("cohere2/tiny4", "exaone4/tiny4")
RUNTIME_CELLS = [pytest.param(Path(sys.executable), f, id=f"newest-{f.replace('/', '-')}",
                              marks=[*marks] + ([pytest.mark.slow] if f in SLOW_ON_NEWEST else []))
                 for f, marks in TEXT_FIXTURES.items()] + [
    pytest.param(AFFECTED_PYTHON, f, id=f"2026.0-{f.replace('/', '-')}",
                 marks=[*marks, needs_affected] + ([] if f in DEFAULT_ON_2026_0 else [pytest.mark.slow]))
    for f, marks in TEXT_FIXTURES.items()]


# one process per runtime, fixture and prompt runs its 8 cells; the group keeps them on one xdist worker
@pytest.mark.xdist_group("sliding-window-family-cells")
@pytest.mark.parametrize("path", CLIENT_PATHS)
@pytest.mark.parametrize("python,fixture", RUNTIME_CELLS)
def test_clients_decode_transformers_tokens_from_the_bounded_model(python, path, fixture):
    """The long prompt (3 windows) and 32 tokens through ov.Core, genai's stateful path and genai's paged path
    (asked for, and as its default backend): the bounded model decodes transformers' tokens. The paged path
    never sees the bound (its converter removes the states); on 2026.0 - 2026.2 its converter reads the window
    only after the Slice the rewrite adds, so there the unmodified folder is wrong (these families'
    transformers 5 masks are Gemma 4's) and every rewritten one right."""
    assert bounded_layers(bounded_model(fixture)) == sliding_layers(fixture)   # the cells below run this model
    unmodified = client_cell(python, fixture, "unmodified", path, "long")
    bounded = client_cell(python, fixture, "bounded", path, "long")
    assert bounded["status"] == "ok", bounded
    first, end = PAGED_WINDOW_NEEDS_SLICE
    window_lost = path in ("paged", "default") and first <= parse_release(unmodified["runtime"]) < end
    assert unmodified["status"] == ("wrong tokens" if window_lost else "ok"), unmodified


@pytest.mark.slow
@pytest.mark.xdist_group("sliding-window-family-cells")
@pytest.mark.parametrize("fixture", text_params())
@pytest.mark.parametrize("path", CLIENT_PATHS)
def test_clients_decode_the_short_prompt_from_the_bounded_model(path, fixture):
    """As above for the prompt shorter than W: the bound is reached while decoding, not in the prefill."""
    assert bounded_layers(bounded_model(fixture)) == sliding_layers(fixture)
    bounded = client_cell(Path(sys.executable), fixture, "bounded", path, "default")
    assert bounded["status"] == "ok", bounded


@pytest.mark.slow
@pytest.mark.parametrize("prompt", ["default", "long"])
@pytest.mark.parametrize("fixture", text_params())
def test_optimum_intel_generates_transformers_tokens_from_the_bounded_folder(fixture, prompt, tmp_path):
    """``ovpass rewrite --sliding-window bounded`` on the folder; OVModelForCausalLM.generate (in .venvs/export:
    it needs torch) decodes transformers' 32 tokens from it, both prompts, every sliding layer's cache bounded."""
    from test_clients import EXPORT_PYTHON, optimum_generate, rewrite_folder   # tests/ is on sys.path

    if not EXPORT_PYTHON.exists():
        pytest.skip("needs .venvs/export (bash tools/venv.sh export)")
    folder = rewrite_folder(FIXTURES / fixture, tmp_path, "--sliding-window", "bounded")
    assert bounded_layers(folder / "openvino_model.xml") == sliding_layers(fixture)
    case = reference(fixture) if prompt == "default" else reference(fixture)["long_prompt"]
    assert optimum_generate("OVModelForCausalLM", folder, case, tmp_path) == case["generated_ids"]


# ---------------------------------------------------------------------------------------------- genai chat

def genai_folder(tmp_path: Path, fixture: str, sliding_window: str, margin: int = 0) -> Path:
    """A copy of ``fixture``'s folder (its tokenizer and chat template) with the model rewritten."""
    folder = tmp_path / f"{fixture.replace('/', '-')}-{sliding_window}-{margin}"
    shutil.copytree(FIXTURES / fixture, folder)
    model = ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    if sliding_window == "bounded":
        ovpasses.rewrite(model, sliding_window=sliding_window, sliding_window_margin=margin)
    ov.save_model(model, folder / "openvino_model.xml", compress_to_fp16=False)
    return folder


TURNS = ("w10 w11 w12 w13", "w20 w21 w22 w23 w24 w25 w26", "w30 w31")
ANSWER = 6


def chat(pipe, turns: tuple[str, ...] = TURNS, answer: int = ANSWER) -> list[list[int]]:
    """Each answer's token ids of ``pipe``'s greedy chat over ``turns`` (testkit.greedy.genai_chat)."""
    return genai_chat(pipe, turns, answer)


CHAT_FIXTURES = ["gpt-oss/tiny4", "gemma3/text6"]


@pytest.mark.parametrize("fixture", [
    pytest.param(f, marks=[*marks] + ([] if f in CHAT_FIXTURES else [pytest.mark.slow]), id=f.replace("/", "-"))
    for f, marks in TEXT_FIXTURES.items()])
def test_genai_chat_on_the_bounded_folder_equals_the_unmodified_one(fixture, tmp_path):
    """openvino_genai's chat (start_chat, three turns of 6 tokens; the chat's context passes W = 8 in every
    turn): the stateful path (SDPA) on a folder bounded with a margin of one answer, and the default paged
    path on one bounded with none, answer as the unmodified folder does (LLMPipeline's stateful chat takes
    each answer back out of the cache: see docs/guides/sliding-window-bounded.md)."""
    import openvino_genai as genai

    assert bounded_layers(bounded_model(fixture, ANSWER)) == sliding_layers(fixture)

    def answers(folder: Path, **kwargs) -> list[list[int]]:
        return chat(genai.LLMPipeline(str(folder), "CPU", **kwargs, **EXACT_CPU_CONFIG))

    full = genai_folder(tmp_path, fixture, "full")
    assert answers(genai_folder(tmp_path, fixture, "bounded", ANSWER), ATTENTION_BACKEND="SDPA") == \
        answers(full, ATTENTION_BACKEND="SDPA")
    assert answers(genai_folder(tmp_path, fixture, "bounded")) == answers(full)


# ---------------------------------------------------------------------------------------------- Gemma 3 VLM

def reference_vlm() -> dict:
    return json.loads((VLM / "reference.json").read_text())


def vlm_cases() -> list[dict]:
    ref = reference_vlm()
    image = ref["image_prompt"]
    return [{"name": "text", "prompt": ref["prompt_text"], "expected": ref["generated_ids"], "image": None},
            {"name": "long", "prompt": ref["long_prompt"]["prompt_text"],
             "expected": ref["long_prompt"]["generated_ids"], "image": None},
            {"name": "image", "prompt": image["prompt_text"], "expected": image["generated_ids"],
             "image": np.load(VLM / image["image"]["file"])}]



@pytest.fixture(scope="module")
def bounded_vlm(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("gemma3-vlm") / "bounded"
    assert cli.main(["rewrite", str(VLM), "-o", str(folder), "--sliding-window", "bounded"]) == 0
    return folder


def vlm_generate(folder: Path, path: str, case: dict) -> list[int]:
    return vlm_pipeline_tokens(folder, path, case["prompt"], case["image"], len(case["expected"]), EXACT_CPU_CONFIG)


# the default run: both paths with the image, the stateful path with the long text prompt; the slow tier the
# other three (the text prompts' paged cells, the short text prompt's stateful one)
VLM_CELLS = [pytest.param(path, case, id=f"{path}-{case['name']}",
                          marks=[] if (path, case["name"]) in {("stateful", "image"), ("paged", "image"),
                                                               ("stateful", "long")} else [pytest.mark.slow])
             for path in ("stateful", "paged") for case in vlm_cases()]


@pytest.mark.parametrize("path, case", VLM_CELLS)
def test_vlm_pipeline_on_the_bounded_gemma3_folder_equals_the_unmodified_one(bounded_vlm, path, case):
    """The bounded Gemma 3 folder's language model keeps its 5 sliding layers' caches to W - 1 and VLMPipeline
    gives the unmodified folder's tokens on it, text prompts shorter and longer than W and the image prompt (4
    image tokens), stateful and paged."""
    assert bounded_layers(bounded_vlm / "openvino_language_model.xml") == {0, 1, 2, 3, 4}
    assert vlm_generate(bounded_vlm, path, case) == vlm_generate(VLM, path, case)


@pytest.mark.xdist_group("sliding-window-family-vlm-cells")
@pytest.mark.parametrize("path", ["core", "paged"])
def test_gemma3_vlm_text_prompt_decodes_transformers_tokens(path):
    """The unmodified Gemma 3 VLM export, text prompt: ov.Core through its embedding IR and genai's paged
    VLMPipeline decode transformers' tokens (the fixture is right)."""
    cell = grid_cell(Path(sys.executable), VLM, "unmodified", path, modes=("unmodified",),
                     paths=("core", "stateful", "paged"))
    assert cell["status"] == "ok", cell


def test_gemma3_vlm_image_prompt_decodes_transformers_tokens_through_core():
    """The image prompt through ov.Core: the processor's pixels into the vision IR, its 4 soft tokens in place of
    the image tokens, token_type_ids marking them: transformers' tokens (the fixture's image path is right)."""
    from testkit.greedy import vlm_greedy

    case = next(c for c in vlm_cases() if c["name"] == "image")
    ids = reference_vlm()["image_prompt"]["prompt_ids"]
    assert vlm_greedy(VLM, ids, len(case["expected"]), "CPU", EXACT_CPU_CONFIG, case["image"])[0] == case["expected"]


@pytest.mark.parametrize("case", vlm_cases(), ids=lambda c: c["name"])
def test_bounded_gemma3_vlm_decodes_transformers_tokens_through_core(bounded_vlm, case):
    """The bounded folder through ov.Core (its embedding and vision IRs, token_type_ids marking the image tokens):
    transformers' 32 tokens after the text prompts shorter and longer than W and after the image prompt."""
    from testkit.greedy import vlm_greedy

    ids = {"text": reference_vlm()["prompt_ids"], "long": reference_vlm()["long_prompt"]["prompt_ids"],
           "image": reference_vlm()["image_prompt"]["prompt_ids"]}[case["name"]]
    tokens, _ = vlm_greedy(bounded_vlm, ids, len(case["expected"]), "CPU", EXACT_CPU_CONFIG, case["image"])
    assert tokens == case["expected"]


@pytest.mark.xdist_group("sliding-window-family-vlm-cells")
def test_genai_stateful_vlm_pipeline_decodes_the_unmodified_gemma3_export_wrong():
    """openvino_genai 2026.4.1's VLMPipeline with ATTENTION_BACKEND="SDPA" decodes the unmodified Gemma 3 export
    differently from transformers, ov.Core and its own paged path from the 3rd token on (measured too with the
    window at 64, never reached: not the window). Pinned so that a fix is noticed."""
    cell = grid_cell(Path(sys.executable), VLM, "unmodified", "stateful", modes=("unmodified",),
                     paths=("core", "stateful", "paged"))
    assert cell["status"] == "wrong tokens" and cell["first_mismatch"] == 2, cell


def _run_vlm_language_model(model: ov.Model, chunks: list[list[int]], decode: int = 4) -> list[np.ndarray]:
    """Feed the Gemma 3 language model random embeddings in ``chunks`` (each a list of token types: 0 text, 1
    image) then ``decode`` text steps; return every step's logits (exact config)."""
    request = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG).create_infer_request()
    request.reset_state()
    rng, past, out = np.random.default_rng(3), 0, []
    for types in chunks + [[0]] * decode:
        n = len(types)
        request.infer({"inputs_embeds": rng.standard_normal((1, n, 64)).astype(np.float32),
                       "attention_mask": np.ones((1, past + n), np.int64),
                       "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
                       "token_type_ids": np.array([types], np.int64), "beam_idx": np.zeros(1, np.int32)})
        past += n
        out.append(request.get_output_tensor(0).data.copy())
    return out


def test_gemma3_image_blocks_longer_than_the_window_stay_exact_whole_or_split():
    """The Gemma 3 language model's mask (the distance form, under a Select that opens image blocks) is recognised
    as a window of 8. Its block condition reads only the step's own token_type_ids (zeros over the past), so an
    image block of 14 tokens, longer than W, gives the unmodified model's logits bounded whether it is fed in
    one inference or split over two. ov.Core, exact config."""
    bounded = ov.Core().read_model(VLM / "openvino_language_model.xml")
    caches = ovpasses.rewrite(bounded, sliding_window="bounded").sliding_window_caches
    assert len(caches.bounded) == 10 and {b.window for b in caches.bounded.values()} == {8}
    for chunks in ([[0, 0] + [1] * 14 + [0, 0]], [[0, 0] + [1] * 14, [1] * 4 + [0, 0]]):
        expected = _run_vlm_language_model(ov.Core().read_model(VLM / "openvino_language_model.xml"), chunks)
        for got, want in zip(_run_vlm_language_model(bounded, chunks), expected):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(1.0, float(np.abs(want).max())))
