"""``ovpass check --genai``: an export folder and its rewritten copy through openvino_genai, side by side.

Users run export folders through openvino_genai: ``LLMPipeline`` for text exports
(``openvino_model.xml``), ``VLMPipeline`` for image-text-to-text exports
(``openvino_language_model.xml`` and its embedding IRs), either stateful
(``ATTENTION_BACKEND="SDPA"``) or with continuous batching (a ``SchedulerConfig``: the runtime
converts SDPA to PagedAttention, as OpenVINO Model Server runs it). This module runs the original
and the rewritten folder both ways, greedy, and reports per path whether each ran and whether their
tokens are equal.

A text export without tokenizer IRs (``openvino_tokenizer.xml``) is fed token ids, which LLMPipeline
takes as they are (:func:`prompt_ids`: the config's ``bos_token_id``, then seeded ids below its
``vocab_size``); its output is compared as token ids. VLMPipeline takes text only (measured on
openvino_genai 2026.4.1: built without a tokenizer, ``generate`` fails with "Tokenizer::encode is not
available", and no overload takes ids), so an image-text-to-text export needs its tokenizer IRs.

Each pipeline runs in its own process (``python -m ovpasses.app.check.genai``): some releases crash
the whole process on some IRs (docs/runtimes.md, runtime notes), and a crash must be a result, not the end
of the check. The worker leaves with ``os._exit`` once its result is printed: openvino_genai 2026.0 -
2026.2.1 segfaults now and then when a pipeline is destroyed, after its work is done.

Where the two folders' paged outputs differ, the rewritten folder's stateful run is the reference
(when the stateful path agreed or was fixed): a paged output that equals it is FIXED, the original's
paged path having been the wrong one (openvino 2025.2 - 2026.2 mixes up Gemma 4's head layouts
there; ``--paged-heads pad`` mends it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ovpasses.app.check.inputs import InputSource
from ovpasses.errors import OvpassesError
from ovpasses.precision import EXACT_CPU_CONFIG

PATHS = ("stateful", "paged")
VLM_MODEL = "openvino_language_model.xml"
VISION_MODEL = "openvino_vision_embeddings_model.xml"
TOKENIZER = "openvino_tokenizer.xml"
DEFAULT_PROMPT = "Describe the picture."
PROMPT_LENGTH = 8   # tokens fed where the folder has no tokenizer


def pipeline_kind(folder: Path) -> str:
    """``vlm`` for an image-text-to-text export, ``llm`` for a text-generation export."""
    if (folder / VLM_MODEL).exists():
        return "vlm"
    if (folder / "openvino_model.xml").exists():
        return "llm"
    raise OvpassesError(f"{folder}: neither openvino_model.xml (text export) nor {VLM_MODEL} (image-text-to-text "
                        "export); --genai needs an optimum-intel export folder")


@dataclass
class GenaiRun:
    """One pipeline on one folder."""

    folder: str
    path: str
    ran: bool = False
    error: str | None = None
    tokens: list[int] = field(default_factory=list)
    text: str | None = None
    prompt_ids: list[int] = field(default_factory=list)   # the ids fed where the folder has no tokenizer
    context: int | None = None   # prompt tokens (as genai counted them) + tokens generated


def _output(run: GenaiRun) -> tuple:
    """What a run gave: its tokens (LLMPipeline) and its text (VLMPipeline returns text)."""
    return run.tokens, run.text


@dataclass
class GenaiPathReport:
    path: str
    original: GenaiRun
    rewritten: GenaiRun
    # where the paged outputs differ: the rewritten folder's stateful run (a path the check vouches for)
    reference: GenaiRun | None = None
    bound_keep: int | None = None   # the most positions a bounded cache of the rewritten folder keeps (None: none)

    @property
    def bounding_exercised(self) -> bool | None:
        """Whether the rewritten run's last inference read bounded caches that had dropped positions (None: no
        cache bounded, or the run did not say how long its context was). Its past is the context less the
        last token generated (never fed) and the token it feeds."""
        context = self.rewritten.context
        return None if self.bound_keep is None or context is None else context - 2 > self.bound_keep

    @property
    def same_output(self) -> bool:
        """Both ran and gave the same tokens (LLMPipeline) or the same text (VLMPipeline returns text)."""
        a, b = self.original, self.rewritten
        return a.ran and b.ran and _output(a) == _output(b)

    @property
    def matches_reference(self) -> bool:
        """The rewritten run gave the reference's output, and the original did not."""
        ref = self.reference
        return ref is not None and ref.ran and self.rewritten.ran and _output(self.rewritten) == _output(ref) \
            and _output(self.original) != _output(ref)

    @property
    def verdict(self) -> str:
        a, b = self.original, self.rewritten
        if a.ran and b.ran and not a.tokens and not b.tokens:
            return "inconclusive"   # nothing generated: nothing compared
        if a.ran and b.ran:
            if self.same_output and self.bound_keep is not None and not self.bounding_exercised:
                return "inconclusive"   # the same tokens, but no step read a cache the bound had cut
            return "ok" if self.same_output else "fixed" if self.matches_reference else "worse"
        if a.ran:
            return "worse"
        return "fixed" if b.ran else "inconclusive"

    def to_dict(self) -> dict:
        return {"path": self.path, "verdict": self.verdict,
                "same_output": self.same_output, "matches_reference": self.matches_reference,
                "bound_keep": self.bound_keep, "bounding_exercised": self.bounding_exercised,
                "original": asdict(self.original), "rewritten": asdict(self.rewritten),
                "reference": None if self.reference is None else asdict(self.reference)}

    def __str__(self) -> str:
        def one(run: GenaiRun) -> str:
            if not run.ran:
                return f"FAILED: {run.error}"
            fed = f" on {len(run.prompt_ids)} token ids (no {TOKENIZER})" if run.prompt_ids else ""
            return f"ran{fed}" + (f", {len(run.tokens)} tokens" if run.tokens else "")
        equal = ("same output" if self.same_output else "output DIFFERS") \
            if self.original.ran and self.rewritten.ran else ""
        if self.matches_reference:
            equal += f" (the rewritten output is the rewritten folder's {self.reference.path} output; the original's is not)"
        elif self.reference is not None and self.reference.ran and self.rewritten.ran:
            equal += f" (and not the rewritten folder's {self.reference.path} output either)"
        if self.bound_keep is not None and self.rewritten.ran:
            context = f"context {self.rewritten.context} tokens" if self.rewritten.context is not None else \
                "context not reported"
            equal += (f"; {context}, past what a bounded cache keeps ({self.bound_keep})" if self.bounding_exercised
                      else f"; {context}: the bound ({self.bound_keep} kept) was not exercised; give --prefill beyond "
                           f"{self.bound_keep}")
        return (f"genai {self.path:<8}: original {one(self.original)}; rewritten {one(self.rewritten)}"
                f"{'; ' + equal if equal else ''} -> {self.verdict.upper()}")


@dataclass
class GenaiPathsReport:
    """openvino_genai's two paths on one folder, against each other: a client path that is wrong for a model
    (genai's paged path ignores Llama 4's chunked attention, measured on 2026.4.1) gives tokens the other path
    does not, whatever the original and its rewrite compare like. ``folder`` is ``original`` or ``rewritten``."""

    folder: str
    stateful: GenaiRun
    paged: GenaiRun

    @property
    def compared(self) -> bool:
        return self.stateful.ran and self.paged.ran and bool(self.stateful.tokens)

    @property
    def first_difference(self) -> int | None:
        """The first generated token (0-based) where the paths differ; None where they agree or were not compared."""
        if not self.compared:
            return None
        a, b = self.stateful.tokens, self.paged.tokens
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))

    @property
    def verdict(self) -> str:
        """``ok`` where the paths agree (or one did not run: the per-path reports say so), ``inconclusive``
        where they differ: one of them is wrong for this model, and comparing a folder with its rewrite cannot
        tell which. The folder's verdict counts the rewritten folder's (what the user runs)."""
        return "inconclusive" if self.first_difference is not None else "ok"

    def to_dict(self) -> dict:
        return {"folder": self.folder, "verdict": self.verdict, "compared": self.compared,
                "first_difference": self.first_difference}

    def __str__(self) -> str:
        if not self.compared:
            return f"genai paths, {self.folder} folder: not compared (a path did not run or generated nothing)"
        at = self.first_difference
        if at is None:
            return f"genai paths, {self.folder} folder: stateful and paged give the same {len(self.stateful.tokens)} tokens"
        return (f"genai paths, {self.folder} folder: stateful and paged DIFFER from generated token {at + 1}: one "
                f"of openvino_genai's paths is wrong for this model (ovpass inspect says which, where it is "
                f"known)" + (" -> INCONCLUSIVE" if self.folder == "rewritten" else ""))


def paths_reports(reports: list[GenaiPathReport]) -> list[GenaiPathsReport]:
    """The stateful and paged runs of each folder against each other (both paths run)."""
    by_path = {r.path: r for r in reports}
    if not {"stateful", "paged"} <= by_path.keys():
        return []
    return [GenaiPathsReport(which, getattr(by_path["stateful"], which), getattr(by_path["paged"], which))
            for which in ("original", "rewritten")]


def token_collector():
    """An openvino_genai streamer that keeps every generated token id."""
    import openvino_genai as genai

    class TokenCollector(genai.StreamerBase):
        def __init__(self):
            super().__init__()
            self.ids: list[int] = []

        def write(self, token):
            self.ids += [int(t) for t in token] if isinstance(token, (list, tuple)) else [int(token)]
            return genai.StreamingStatus.RUNNING

        def end(self):
            pass

    return TokenCollector()


def prompt_ids(folder: Path, length: int = PROMPT_LENGTH, seed: int = 0) -> list[int]:
    """The token ids fed to a text export without tokenizer IRs: its config's ``bos_token_id`` (where it
    has one), then seeded ids below its ``vocab_size``. The same for a folder and its rewritten copy."""
    config = InputSource(folder)
    vocab = config.config_value("vocab_size")
    if vocab is None:
        raise OvpassesError(f"{folder}: no {TOKENIZER} and no vocab_size in a config.json: nothing says which "
                            "token ids the model takes")
    bos = config.config_value("bos_token_id")
    ids = np.random.default_rng(seed).integers(0, vocab, size=length).tolist()
    return ([bos] + ids[1:]) if bos is not None else ids


def run_genai(folder: Path, path: str, prompt: str, max_new_tokens: int, device: str = "CPU",
                 image: bool = True, prefill: int | None = None) -> GenaiRun:
    """Run one greedy generation in this process (the worker's body). ``prefill``: a prompt of that many
    tokens (a text export: :func:`prompt_ids` of that length; an image-text-to-text export: ``prompt``
    repeated until its tokens are at least that many) instead of ``prompt`` as it is."""
    import openvino as ov
    import openvino_genai as genai

    run = GenaiRun(str(folder), path)
    kind = pipeline_kind(folder)
    tokenizer = (folder / TOKENIZER).exists()
    if kind == "vlm" and not tokenizer:
        raise OvpassesError(f"VLMPipeline takes text only and the folder has no {TOKENIZER}: keep the export's "
                            "tokenizer IRs beside the models")
    kwargs: dict = {"ATTENTION_BACKEND": "SDPA"} if path == "stateful" else {"scheduler_config": genai.SchedulerConfig()}
    if device.upper().startswith("CPU"):   # the defaults (bf16, f16 caches) flip near-tied greedy picks
        kwargs.update(EXACT_CPU_CONFIG)
    config = genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.min_new_tokens = max_new_tokens
    config.do_sample = False
    if kind == "vlm":
        pipe = genai.VLMPipeline(str(folder), device, **kwargs)
        _stop_token(pipe, config)
        extra = {}
        if image and (folder / VISION_MODEL).exists():
            pixels = (np.arange(32 * 32 * 3, dtype=np.uint32).reshape(1, 32, 32, 3) * 37 % 256).astype(np.uint8)
            extra["images"] = [ov.Tensor(pixels)]
        if prefill is not None:
            text, encode = prompt, pipe.get_tokenizer().encode
            while encode(text).input_ids.get_shape()[1] < prefill:
                text += " " + prompt
            prompt = text
        streamer = token_collector()   # VLMPipeline's results carry text only: the streamer sees the ids
        result = pipe.generate(prompt, generation_config=config, streamer=streamer, **extra)
        run.text = result.texts[0]
        run.tokens = list(streamer.ids)
    elif not tokenizer or prefill is not None:   # token ids in and out
        pipe = genai.LLMPipeline(str(folder), device, **kwargs)
        _stop_token(pipe, config)
        run.prompt_ids = prompt_ids(folder, PROMPT_LENGTH if prefill is None else prefill)
        ids = np.array([run.prompt_ids], np.int64)
        result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
        run.tokens = [int(t) for t in result.tokens[0]]
    else:
        # through the folder's tokenizer, then token ids in and out: the exact tokens, not a re-encoding
        pipe = genai.LLMPipeline(str(folder), device, **kwargs)
        _stop_token(pipe, config)
        tokenizer = pipe.get_tokenizer()
        result = pipe.generate(tokenizer.encode(prompt), config)
        run.tokens = [int(t) for t in result.tokens[0]]
        run.text = tokenizer.decode(run.tokens)
    metrics = result.perf_metrics
    run.context = int(metrics.get_num_input_tokens()) + int(metrics.get_num_generated_tokens())
    run.ran = True
    return run


def _stop_token(pipe, config) -> None:
    """An export that names no end-of-sequence token (no ``eos_token_id`` in its generation or model config,
    no tokenizer IRs) leaves the pipeline's stop tokens at -1, which genai 2026.4.1 refuses at every
    ``generate`` ("'stop_token_ids' must be non-negative, but it contains a value -1"; clearing the stop tokens
    does not help). The check generates exactly ``max_new_tokens`` (``min_new_tokens`` is the same), so any
    valid id stops nothing: give the request token 0."""
    if pipe.get_generation_config().eos_token_id < 0:
        config.eos_token_id = 0


def run_isolated(folder: Path, path: str, prompt: str, max_new_tokens: int, device: str,
                 timeout: float = 600, prefill: int | None = None) -> GenaiRun:
    """:func:`run_genai` in a child process; a crash or an exception is recorded as an error."""
    command = [sys.executable, "-m", "ovpasses.app.check.genai", str(folder), "--path", path, "--prompt", prompt,
               "--max-new-tokens", str(max_new_tokens), "--device", device] + \
        ([] if prefill is None else ["--prefill", str(prefill)])
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return GenaiRun(str(folder), path, error=f"timed out after {timeout:.0f} s")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        return GenaiRun(**json.loads(lines[-1]))
    tail = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    what = f"the process crashed (signal {-proc.returncode})" if proc.returncode < 0 else \
        (tail[-1][:300] if tail else f"exit {proc.returncode}")
    return GenaiRun(str(folder), path, error=what)


def check_folders(original: Path, rewritten: Path, prompt: str = DEFAULT_PROMPT, max_new_tokens: int = 8,
                  device: str = "CPU", paths=PATHS, prefill: int | None = None,
                  bound_keep: int | None = None) -> list[GenaiPathReport]:
    """Both folders through openvino_genai on each path in ``paths``, on a prompt of ``prefill`` tokens (None:
    ``prompt``); on the paged path, where the outputs differ, the rewritten stateful run (when that path
    agreed or was fixed) is the reference. ``bound_keep`` (the most positions a bounded cache of
    ``rewritten`` keeps) makes equal tokens inconclusive where the run never went past it."""
    try:
        import openvino_genai  # noqa: F401
    except ImportError:
        raise OvpassesError("--genai needs openvino_genai: pip install 'ovpasses[genai]' (openvino-genai and "
                            "openvino-tokenizers of the installed openvino's release)") from None
    reports = [GenaiPathReport(path, run_isolated(original, path, prompt, max_new_tokens, device, prefill=prefill),
                               run_isolated(rewritten, path, prompt, max_new_tokens, device, prefill=prefill),
                               bound_keep=bound_keep) for path in paths]
    stateful = next((r for r in reports if r.path == "stateful" and r.verdict in ("ok", "fixed")), None)
    for report in reports:
        if report.path == "paged" and stateful is not None and not report.same_output:
            report.reference = stateful.rewritten
    return reports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one openvino_genai pipeline on an export folder (worker).")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--path", choices=PATHS, required=True)
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--prefill", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        run = run_genai(args.folder, args.path, args.prompt, args.max_new_tokens, args.device, prefill=args.prefill)
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        run = GenaiRun(str(args.folder), args.path, error=(lines[-1] if lines else type(exc).__name__)[:300])
    print(json.dumps(asdict(run)), flush=True)
    sys.stderr.flush()
    os._exit(0)   # genai 2026.0 - 2026.2.1 segfaults now and then when a pipeline is destroyed (after the print)


if __name__ == "__main__":
    sys.exit(main())
