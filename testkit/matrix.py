"""Run one exported LLM fixture one way, under whichever OpenVINO this interpreter has.

    python -m testkit.matrix FIXTURE_DIR --mode unmodified|rewritten|recovered|unshared|bounded|unshared-bounded|trimmable|unshared-trimmable|paged-pad|decomposed
                                      --path core|stateful|paged|default|batching [PATH ...]
                                      [--prompt default|long]

prints one JSON object per cell, in one process (``--mode`` and ``--path`` take comma lists: every mode
on every path): the runtime, whether the tokens equal transformers'
(reference.json), the error if it failed, and the fused SDPA count (core path); then leaves with
``os._exit`` (openvino_genai 2026.0 - 2026.2.1 segfaults now and then when a pipeline is destroyed,
after its work is done). Several paths in one process save a start-up each; run an IR that the paged
path gets wrong on 2026.0 in a process of its own (its kernel corrupts the heap: the next pipeline of
that process may crash). ``--prompt long`` uses the reference's
``long_prompt`` (a prompt longer than the sliding window; only fixtures exported with
``--long-prompt-length`` have one). ``bounded`` and ``unshared-bounded`` add
``sliding_window="bounded"``; ``paged-pad`` adds ``paged_heads="pad"`` (one head layout for the CPU
PagedAttention). ``recovered`` runs EagerAttentionToSDPA alone
(``passes="EagerAttentionToSDPA"``: an eager IR's SDPAs recovered, without the runtime plan).
``decomposed`` is the blunt alternative to
ovpasses' plan: every SDPA decomposed by ScaledDotProductAttentionDecomposition.
``tools/runtime_matrix.py`` runs this in one subprocess per cell and per runtime virtual environment,
so that a crash of one runtime (some segfault) costs one cell only. FIXTURE_DIR is any export folder
with a ``reference.json``: a fixture, or one that ``ovpass rewrite DIR -o FIXTURE_DIR --runtime X``
wrote under the newest runtime for runtime X (run it ``--mode unmodified`` under X: the runtime
matrix's ``prepared`` mode).

Paths: ``core`` is a greedy loop over ``ov.Core`` (compiled with f32 precision and an f32 KV cache,
the settings under which CPU reproduces fp32 transformers); ``stateful`` and ``paged`` are
openvino_genai's LLMPipeline with ``ATTENTION_BACKEND="SDPA"`` and with a ``SchedulerConfig``
(continuous batching, where the runtime converts SDPA to PagedAttention), fed token ids; ``default``
is LLMPipeline with neither (its default backend), ``batching`` is ``ContinuousBatchingPipeline``
itself (what OpenVINO Model Server runs); text exports only. The genai
folder holds the model without the tokenizer: tokenizers converted by a newer openvino_tokenizers
crash older genai releases when loaded (measured: genai 2026.0 segfaults on a 2026.4 tokenizer).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov

from ovpasses.app.check import count_fused_sdpa
from testkit.greedy import greedy_generate
from ovpasses.precision import EXACT_CPU_CONFIG

ROOT = Path(__file__).resolve().parents[1]   # the checkout: testkit/ and ovpasses/ side by side


def worker_env() -> dict[str, str]:
    """The environment of a worker process: this one's, with the checkout first on ``PYTHONPATH``, so that
    another venv's interpreter imports ``testkit`` (which no wheel holds) and ``ovpasses`` from this
    checkout, whatever that venv has installed."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


REWRITE_MODES = ("rewritten", "unshared", "bounded", "unshared-bounded", "trimmable", "unshared-trimmable", "paged-pad",
                 "recovered")
MODES = ("unmodified", *REWRITE_MODES, "trimmable-sliced", "decomposed")
MODEL_FILES = ("openvino_model.xml", "openvino_model.bin", "config.json", "generation_config.json")


def lost_its_state(cell: dict) -> bool:
    """A cell failed as an IR whose fused cache lost its state fails: "null input states", or, in a process that holds
    one CPU, the client's own error on the empty logits the plugin returns there (a synchronous infer hides the
    error: docs/runtimes.md, tests/test_runtimes.py::test_affected_unmodified_on_one_core_gives_empty_logits_...):
    greedy decoding's "size 0" over ov.Core, openvino_genai's sampler check "token_idx < seq_len" (2026.0.0)."""
    if cell.get("status") != "failed":
        return False
    error = cell.get("error", "")
    one_cpu = len(os.sched_getaffinity(0)) < 2
    return "null input states" in error or (one_cpu and ("size 0" in error or "token_idx < seq_len" in error))


def rewrite_trimmable_key_columns(model: ov.Model, sliced: bool) -> None:
    """``ovpasses.rewrite(model, sliding_window="trimmable")`` with the sliding layers' key columns a Slice of the
    exported mask (``sliced``) or built from its inputs at every window, whatever the library chooses for the
    model's windows (``SLICED_FROM`` moved for the rewrite, then put back)."""
    import ovpasses
    import ovpasses.features.sliding_window.sliding_window_cache_trimmable as trimmable_pass

    saved = trimmable_pass.SLICED_FROM
    trimmable_pass.SLICED_FROM = 1 if sliced else 1 << 62
    try:
        ovpasses.rewrite(model, sliding_window="trimmable")
    finally:
        trimmable_pass.SLICED_FROM = saved


def apply_mode(model: ov.Model, mode: str) -> ov.Model:
    """``model`` as the mode runs it, changed in place: ``unmodified``, ``rewritten``
    (:func:`ovpasses.rewrite`), ``unshared`` (``rewrite(kv_sharing="unshare")``), ``bounded``
    (``rewrite(sliding_window="bounded")``), ``unshared-bounded`` (both), ``trimmable`` and ``unshared-trimmable``
    (``sliding_window="trimmable"``, nobody trimming: as a client that does not run the trimmer),
    ``trimmable-sliced`` (the same with the key columns a Slice of the exported mask at any window), ``paged-pad``
    (``rewrite(paged_heads="pad")``) or ``decomposed`` (every SDPA
    decomposed)."""
    if mode == "trimmable-sliced":
        # the form models with windows of 4,096 beside full layers get (SLICED_FROM), at the fixtures' windows
        rewrite_trimmable_key_columns(model, sliced=True)
    elif mode in REWRITE_MODES:
        import ovpasses
        ovpasses.rewrite(model, kv_sharing="unshare" if mode.startswith("unshared") else "keep",
                         sliding_window="bounded" if mode.endswith("bounded") else
                         "trimmable" if mode.endswith("trimmable") else "full",
                         paged_heads="pad" if mode == "paged-pad" else "keep",
                         passes="EagerAttentionToSDPA" if mode == "recovered" else None)
    elif mode == "decomposed":
        from openvino.passes import Manager

        from ovpasses import ScaledDotProductAttentionDecomposition
        manager = Manager()
        manager.register_pass(ScaledDotProductAttentionDecomposition())
        manager.run_passes(model)
    elif mode != "unmodified":
        raise ValueError(f"unknown mode {mode!r}")
    return model


@functools.cache
def load(fixture: Path, mode: str) -> ov.Model:
    """``fixture``'s model as ``mode`` runs it, read and rewritten once per process: the cells of one mode on
    several paths run the same model (compiling it and saving it for genai leave it as it is); a read or a
    rewrite that raises is not kept, and raises again in the next cell that asks."""
    return apply_mode(ov.Core().read_model(fixture / "openvino_model.xml"), mode)


PROMPTS = ("default", "long")


def reference_tokens(fixture: Path, prompt: str = "default") -> tuple[list[int], list[int]]:
    """(prompt ids, transformers' greedy tokens) of ``fixture``'s reference.json for ``prompt``."""
    reference = json.loads((fixture / "reference.json").read_text())
    if prompt == "long":
        if "long_prompt" not in reference:
            raise ValueError(f"{fixture.name}/reference.json has no long_prompt (export with --long-prompt-length)")
        reference = reference["long_prompt"]
    elif prompt != "default":
        raise ValueError(f"unknown prompt {prompt!r}; one of {', '.join(PROMPTS)}")
    # a weight-compressed IR is checked against its own tokens (tools/export_gemma4.py --weight-format int8)
    return reference["prompt_ids"], reference.get("ir_reference", reference)["generated_ids"]


def grid_in(python: Path, folder: Path, modes: list[str], paths: list[str], prompt: str = "default",
            timeout: int = 600, *, one_core: bool = False) -> list[dict]:
    """Every mode of ``modes`` on every path of ``paths`` (in that order), run by ``python`` (a venv's
    interpreter, so under its runtime) in one process of their own: this module's ``main`` on
    ``folder``; the JSON objects it printed. :class:`AssertionError` (for tests) when the worker died,
    with its stderr's end. ``one_core``: the process may run on one CPU only (the plugin then compiles one
    stream of one thread)."""
    import subprocess

    def on_one_core() -> None:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    proc = subprocess.run([str(python), "-m", "testkit.matrix", str(folder), "--mode", ",".join(modes),
                           "--path", ",".join(paths), "--prompt", prompt], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=worker_env(), preexec_fn=on_one_core if one_core else None)
    cells = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    expected = len(modes) * len(paths)
    assert proc.returncode == 0 and len(cells) == expected, \
        f"worker died (exit {proc.returncode}) after {len(cells)} of {expected} cells: {proc.stderr[-2000:]}"
    return cells


def cells_in(python: Path, folder: Path, mode: str, paths: list[str], prompt: str = "default",
             timeout: int = 600) -> dict[str, dict]:
    """One mode on several paths in one process (:func:`grid_in`), by path."""
    return {cell["path"]: cell for cell in grid_in(python, folder, [mode], paths, prompt, timeout)}


@functools.cache
def _grid(python: Path, folder: Path, modes: tuple[str, ...], paths: tuple[str, ...], prompt: str) -> dict:
    return {(cell["mode"], cell["path"]): cell for cell in grid_in(python, folder, list(modes), list(paths), prompt)}


def grid_cell(python: Path, folder: Path, mode: str, path: str, prompt: str = "default", *,
              modes: tuple[str, ...], paths: tuple[str, ...]) -> dict:
    """``mode`` on ``path`` (one of ``modes`` and ``paths``), from the grid of ``modes`` x ``paths`` that
    ``python`` runs in one process (:func:`grid_in`) the first time a caller of this process asks for
    one of its cells: the tests of one grid share one start-up. Make those tests one ``xdist_group``
    (``--dist loadgroup``), so that one pytest-xdist worker runs them all. Only for IRs that no path
    of the grid gets wrong in a way that corrupts the heap (see the module's note)."""
    if mode not in modes or path not in paths:
        raise ValueError(f"{mode} on {path} is not in the grid of {modes} x {paths}")
    return _grid(python, folder, tuple(modes), tuple(paths), prompt)[(mode, path)]


def cell_in(python: Path, folder: Path, mode: str, path: str, prompt: str = "default", timeout: int = 600) -> dict:
    """One cell in a process of its own (:func:`grid_in`)."""
    return cells_in(python, folder, mode, [path], prompt, timeout)[path]


def run_cell(fixture: Path, mode: str, path: str, prompt_kind: str = "default") -> dict:
    prompt, expected = reference_tokens(fixture, prompt_kind)
    result = {"runtime": ov.get_version().split("-")[0], "fixture": fixture.name, "mode": mode, "path": path,
              "prompt": prompt_kind}
    start = time.perf_counter()
    try:
        if (fixture / VLM_MODEL).exists():
            tokens = _vlm(fixture, mode, path, prompt, len(expected), result)
        elif path == "core":
            model = load(fixture, mode)
            compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
            result["fused_sdpa"] = count_fused_sdpa(compiled)
            tokens = greedy_generate(compiled, prompt, len(expected))
        else:
            tokens = _genai(load(fixture, mode), fixture, path, prompt, len(expected))
        result["tokens_match"] = tokens == expected
        result["status"] = "ok" if tokens == expected else "wrong tokens"
        if tokens != expected:
            result["first_mismatch"] = next(i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b)
    except Exception as exc:  # a failing runtime is a result here, not an error
        result["status"] = "failed"
        result["error"] = (str(exc).strip().splitlines() or [repr(exc)])[-1][:300]
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


VLM_MODEL = "openvino_language_model.xml"


def _vlm(fixture: Path, mode: str, path: str, prompt: list[int], steps: int, result: dict) -> list[int]:
    """A Gemma 4 image-text-to-text export (text prompt): its language model as the mode runs it, in a copy
    of the folder; ``core`` through its embedding IRs (:func:`testkit.greedy.vlm_greedy`), ``stateful``
    and ``paged`` through openvino_genai's VLMPipeline given the reference's ``prompt_text``."""
    from testkit.greedy import vlm_greedy, vlm_pipeline_tokens

    with tempfile.TemporaryDirectory(prefix="ovpasses-vlm-") as tmp:
        folder = Path(tmp) / fixture.name
        shutil.copytree(fixture, folder)
        model = apply_mode(ov.Core().read_model(fixture / VLM_MODEL), mode)
        for suffix in (".xml", ".bin"):
            (folder / VLM_MODEL).with_suffix(suffix).unlink()
        ov.save_model(model, folder / VLM_MODEL, compress_to_fp16=False)
        if path == "core":
            tokens, result["fused_sdpa"] = vlm_greedy(folder, prompt, steps, "CPU", EXACT_CPU_CONFIG)
            return tokens
        text = json.loads((fixture / "reference.json").read_text())["prompt_text"]
        return vlm_pipeline_tokens(folder, path, text, None, steps, EXACT_CPU_CONFIG)


def _genai(model: ov.Model, fixture: Path, path: str, prompt: list[int], steps: int) -> list[int]:
    import openvino_genai as genai

    with tempfile.TemporaryDirectory(prefix="ovpasses-genai-") as tmp:
        folder = Path(tmp)
        for name in MODEL_FILES[2:]:
            if (fixture / name).exists():
                shutil.copy(fixture / name, folder / name)
        ov.save_model(model, folder / "openvino_model.xml", compress_to_fp16=False)
        if path not in GENAI_PATHS:
            raise ValueError(f"unknown path {path!r}")
        config = genai.GenerationConfig()
        config.max_new_tokens = steps
        config.min_new_tokens = steps
        config.do_sample = False
        ids = np.array([prompt], np.int64)
        if path == "batching":
            pipe = genai.ContinuousBatchingPipeline(str(folder), genai.SchedulerConfig(), "CPU", EXACT_CPU_CONFIG)
            tokens = [int(t) for t in pipe.generate([ov.Tensor(ids)], [config])[0].m_generation_ids[0]]
        else:
            kwargs = {"stateful": {"ATTENTION_BACKEND": "SDPA"}, "default": {},
                      "paged": {"scheduler_config": genai.SchedulerConfig()}}[path]
            pipe = genai.LLMPipeline(str(folder), "CPU", **kwargs, **EXACT_CPU_CONFIG)
            result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
            tokens = [int(t) for t in result.tokens[0]]
        del pipe
        return tokens


GENAI_PATHS = ("stateful", "paged", "default", "batching")
PATHS = ("core", *GENAI_PATHS)


def _choices(valid: tuple[str, ...]):
    """An argparse type: a comma list of names out of ``valid``."""
    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: not one of {', '.join(valid)}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("--mode", type=_choices(MODES), required=True, help="one, or a comma list")
    parser.add_argument("--path", type=_choices(PATHS), nargs="+", required=True,
                        help="one or more, each one or a comma list")
    parser.add_argument("--prompt", choices=PROMPTS, default="default")
    args = parser.parse_args(argv)
    paths = [path for group in args.path for path in group]
    for mode in args.mode:
        for path in paths:
            print(json.dumps(run_cell(args.fixture, mode, path, args.prompt)), flush=True)
    sys.stderr.flush()
    os._exit(0)   # see the module's docstring: genai's teardown may crash after the results are out


if __name__ == "__main__":
    sys.exit(main())
