"""Damaged IRs and export folders, fuzzed: every one ends in a clean answer, never an internal error.

A seeded generator (case ``N`` is ``random.Random(N)``: a failure names its seed and is rerun by it)
damages a copy of a fixture export in one of the classes a user meets — a truncated or bit-flipped
``.xml``, a ``.bin`` shorter than the IR says or with flipped bytes, a broken ``config.json``, a folder
where a file should be, a dim or a constant's shape, offset or size that is negative, zero, huge or not
a number, an attribute that says another operation, type or edge, a file missing from the folder — and runs ``ovpass inspect``, ``rewrite`` or ``check`` on it,
in each ``--format``, on the IR file or on the folder. Each case asserts:

* the exit code is one a damaged input may give: 0 only where the damaged model really loads (OpenVINO
  reads it, checked apart from ovpass), 2 for an input error, and for ``check`` also its verdicts (1, 4);
* an error is exactly one ``ovpass: error:`` line on stderr that names the damaged file (or the folder,
  for a file whose absence leaves no name behind), with no traceback; under ``--format json`` stdout
  holds the error object (``ovpass.error/1``) with the same message;
* nothing is left behind: no output, no temporary file, and the input folder is byte for byte as it was;
* the case ends within :data:`CASE_SECONDS`.

The default run takes :data:`DEFAULT_CASES` cases on the tiny fixtures, in this process
(``run_main``: a process per case would cost a second each and add nothing); ``--runslow`` takes
:data:`SLOW_CASES` over every fixture listed in :data:`SLOW_FIXTURES`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import re
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import openvino as ov
import pytest

from testkit.cli import run_main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
DEFAULT_FIXTURES = ("gemma4/tiny8", "gemma4/vlm8")
SLOW_FIXTURES = ("gemma4/tiny8", "gemma4/vlm8", "gemma3n/tiny8", "gemma4/tiny8e", "gemma4/tiny8u")
DEFAULT_CASES = 100
SLOW_CASES = 3000
CASE_SECONDS = 60
# check's own arguments: the smallest run that still compiles both models and runs a decode step
CHECK_ARGS = ("--steps", "1", "--prefill", "2")
FORMATS = {"inspect": ("text", "json", "dot"), "rewrite": ("text", "json"), "check": ("text", "json")}
# the exit codes a damaged input may give, per command (0: only where the damaged model loads)
ALLOWED = {"inspect": {0, 2}, "rewrite": {0, 2}, "check": {0, 1, 2, 4}}
# dims and numbers a damaged IR may hold where a size belongs
BAD_NUMBERS = ("-7", "-2", "0", "1", "3", str(2**31), str(2**40), str(2**63 + 5), "abc", "1.5", "", " ", "-0",
               "0x10", "1e9", "?", "-1")


# ------------------------------------------------------------------------------------------ fixtures

@functools.lru_cache(maxsize=None)
def pristine(fixture: str) -> tuple[tuple[str, bytes], ...]:
    """The files of a fixture folder, read once per session."""
    folder = FIXTURES / fixture
    return tuple((p.name, p.read_bytes()) for p in sorted(folder.iterdir()) if p.is_file())


def model_xml(files: dict[str, bytes]) -> str:
    """The IR that holds stateful attention: the one ``ovpass`` works on in a folder."""
    return "openvino_language_model.xml" if "openvino_language_model.xml" in files else "openvino_model.xml"


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: files by their bytes, folders as None, links by their target."""
    found: dict[str, bytes | None] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = (os.readlink(path).encode() if path.is_symlink() else
                      None if path.is_dir() else path.read_bytes())
    return found


# ------------------------------------------------------------------------------------------ damage

@dataclass(frozen=True)
class Damage:
    """One way to damage an export: its class, what it did (for the failure message), the files a
    message about it may name (the damaged file; the IR that reads it), and the change itself."""

    kind: str
    what: str
    names: tuple[str, ...]
    apply: Callable[[Path], None]
    model_damaged: bool = True   # whether it touches the IR ovpass reads (exit 0 then needs it to load)


def _flip_bits(data: bytes, rng: random.Random, flips: int) -> bytes:
    out = bytearray(data)
    for _ in range(flips):
        at = rng.randrange(len(out))
        out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def _rewrite_file(name: str, change: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / name
        path.write_bytes(change(path.read_bytes()))
    return apply


def _replace_nth(pattern: bytes, index: int, value: Callable[[re.Match], bytes]) -> Callable[[bytes], bytes]:
    """Replace the ``index``-th match of ``pattern`` (modulo the match count) by ``value(match)``."""
    def change(data: bytes) -> bytes:
        matches = list(re.finditer(pattern, data))
        if not matches:
            return data
        match = matches[index % len(matches)]
        return data[:match.start()] + value(match) + data[match.end():]
    return change


def _xml_of(files: dict[str, bytes], rng: random.Random, model: str) -> str:
    """Mostly the model's IR; now and then another IR of the folder (tokenizer, embeddings)."""
    others = [n for n in files if n.endswith(".xml") and n != model]
    return model if not others or rng.random() < 0.7 else rng.choice(others)


def damage_for(rng: random.Random, files: dict[str, bytes], kind: str) -> Damage:
    """A damage of class ``kind`` to the fixture ``files``, drawn from ``rng``."""
    model = model_xml(files)
    if kind == "xml_truncated":
        xml = _xml_of(files, rng, model)
        keep = rng.randrange(len(files[xml]))
        return Damage(kind, f"{xml} cut to {keep} bytes", (xml,), _rewrite_file(xml, lambda d: d[:keep]),
                      xml == model)
    if kind == "xml_bitflip":
        xml = _xml_of(files, rng, model)
        flips, seed = rng.randint(1, 8), rng.randrange(2**32)
        return Damage(kind, f"{xml}: {flips} bit(s) flipped (seed {seed})", (xml,),
                      _rewrite_file(xml, lambda d: _flip_bits(d, random.Random(seed), flips)), xml == model)
    if kind == "bin_truncated":
        xml = _xml_of(files, rng, model)
        weights = xml[:-4] + ".bin"
        keep = rng.randrange(len(files[weights]))
        return Damage(kind, f"{weights} cut to {keep} bytes", (weights, xml),
                      _rewrite_file(weights, lambda d: d[:keep]), xml == model)
    if kind == "bin_bitflip":
        xml = _xml_of(files, rng, model)
        weights = xml[:-4] + ".bin"
        flips, seed = rng.randint(1, 64), rng.randrange(2**32)
        return Damage(kind, f"{weights}: {flips} bit(s) flipped (seed {seed})", (weights, xml),
                      _rewrite_file(weights, lambda d: _flip_bits(d, random.Random(seed), flips)), xml == model)
    if kind == "config_broken":
        name = "config.json" if rng.random() < 0.8 else rng.choice([n for n in files if n.endswith(".json")])
        text = files[name]
        broken = rng.choice([
            ("cut", lambda d: d[:rng_keep(d)]), ("empty", lambda d: b""), ("a list", lambda d: b"[1, 2]\n"),
            ("junk", lambda d: bytes(range(256))), ("not UTF-8", lambda d: d.replace(b"{", b"{\xff\xfe", 1)),
            ("wrong types", lambda d: b'{"vocab_size": "many", "hidden_size": -3, "text_config": 5, '
                                      b'"num_hidden_layers": 1e400}\n'),
            ("a number", lambda d: b"42"), ("flipped bits", lambda d: _flip_bits(d, random.Random(len(d)), 3)),
        ])
        keep = rng.randrange(max(1, len(text)))

        def rng_keep(data: bytes) -> int:
            return min(keep, len(data))
        return Damage(kind, f"{name}: {broken[0]}", (name,), _rewrite_file(name, broken[1]), False)
    if kind == "folder_for_file":
        name = rng.choice([model, model[:-4] + ".bin", "config.json", _xml_of(files, rng, model)])

        def apply(folder: Path) -> None:
            (folder / name).unlink()
            (folder / name).mkdir()
            (folder / name / "inside.txt").write_text("a folder where a file should be\n")
        return Damage(kind, f"{name} is a folder", (name, name[:-4] + ".xml"), apply,
                      name[:-4] in (model[:-4],))
    if kind == "missing":
        name = rng.choice([model, model[:-4] + ".bin", "config.json",
                           *[n for n in files if n.endswith((".xml", ".bin"))]])

        def apply(folder: Path) -> None:
            (folder / name).unlink()
        return Damage(kind, f"{name} missing", (name, name[:-4] + ".xml", name[:-4] + ".bin"), apply,
                      name[:-4] == model[:-4])
    if kind == "dim":
        xml = model if rng.random() < 0.85 else _xml_of(files, rng, model)
        value = rng.choice(BAD_NUMBERS).encode()
        index = rng.randrange(10**6)
        where = rng.choice(["dim", "shape", "offset", "size"])
        if where == "dim":
            change = _replace_nth(rb"<dim>[^<]*</dim>", index, lambda m: b"<dim>" + value + b"</dim>")
        elif where == "shape":   # one entry of a Parameter's or a Const's shape="..."
            def entry(m: re.Match) -> bytes:
                dims = m.group(1).split(b",")
                dims[index % len(dims)] = value
                return b'shape="' + b",".join(dims) + b'"'
            change = _replace_nth(rb'shape="([^"]*)"', index, entry)
        else:
            change = _replace_nth(rf'{where}="[^"]*"'.encode(), index, lambda m: where.encode() + b'="' + value + b'"')
        return Damage(kind, f"{xml}: a {where} set to {value!r} (match {index})",
                      (xml, xml[:-4] + ".bin"), _rewrite_file(xml, change), xml == model)
    if kind == "xml_attribute":   # well-formed XML that says something else: an op, a type, an edge
        xml = model if rng.random() < 0.85 else _xml_of(files, rng, model)
        key = rng.choice(ATTRIBUTES)
        values = sorted(set(re.findall(rf' {key}="([^"]*)"'.encode(), files[xml]))) or [b""]
        value = rng.choice([*rng.sample(values, min(3, len(values))), b"", b"Frobnicate", b"-1", b"99999"])
        index = rng.randrange(10**6)
        change = _replace_nth(rf' {key}="[^"]*"'.encode(), index, lambda m: f' {key}="'.encode() + value + b'"')
        return Damage(kind, f"{xml}: a {key} set to {value!r} (match {index})", (xml, xml[:-4] + ".bin"),
                      _rewrite_file(xml, change), xml == model)
    raise ValueError(kind)


# the attributes an xml_attribute damage changes: what an operation is, its element types, the graph's edges
ATTRIBUTES = ("type", "version", "element_type", "precision", "from-layer", "to-layer", "from-port", "to-port",
              "variable_id", "axis", "special_zero", "destination_type")
KINDS = ("xml_truncated", "xml_bitflip", "xml_attribute", "bin_truncated", "bin_bitflip", "config_broken",
         "folder_for_file", "missing", "dim")


# ------------------------------------------------------------------------------------------ cases

@dataclass(frozen=True)
class Case:
    seed: int
    fixture: str
    damage: Damage
    command: str
    fmt: str
    form: str   # "file": the model's .xml; "folder": the export folder
    for_client: str | None = None   # rewrite --for CLIENT (None: the default rewrite)

    def __str__(self) -> str:
        command = f"{self.command} --for {self.for_client}" if self.for_client and self.command == "rewrite" \
            else self.command
        return (f"seed {self.seed}: {self.fixture}, {self.damage.kind} ({self.damage.what}), "
                f"{command} --format {self.fmt} on the {self.form}")


def make_case(seed: int, fixtures: tuple[str, ...]) -> Case:
    rng = random.Random(seed)
    fixture = rng.choice(fixtures)
    files = dict(pristine(fixture))
    kind = KINDS[seed % len(KINDS)]   # every class equally often, whatever the count
    damage = damage_for(rng, files, kind)
    # check compiles and runs both models: the costly command, a seventh of the cases
    command = rng.choices(("inspect", "rewrite", "check"), weights=(3, 3, 1))[0]
    case = Case(seed, fixture, damage, command, rng.choice(FORMATS[command]), rng.choice(("file", "folder")))
    # a rewrite also as `rewrite --for`, from an RNG of its own: the cases drawn above stay what they were
    return dataclasses.replace(case, for_client=random.Random(f"for {seed}").choice((None, "core", "genai")))


class CaseTimeout(BaseException):
    """Raised by the alarm inside the command (a BaseException: the CLI turns an Exception into exit 3)."""


def run_case(case: Case, tmp: Path, core: ov.Core) -> tuple[int | None, list[str]]:
    """Run one case in ``tmp`` (empty): its exit code (None: the damage changed nothing, so nothing ran) and
    what went wrong (empty: the case passed)."""
    source = tmp / "in"
    source.mkdir()
    files = dict(pristine(case.fixture))
    for name, data in files.items():
        (source / name).write_bytes(data)
    case.damage.apply(source)
    before = tree(source)
    if before == {name: data for name, data in files.items()}:   # e.g. an attribute set to its own value
        return None, []
    target = source / model_xml(files) if case.form == "file" else source
    args = [case.command, target, "--format", case.fmt]
    output = tmp / ("out.xml" if case.form == "file" else "out")
    if case.command == "rewrite":
        args += ["-o", output] + (["--for", case.for_client] if case.for_client else [])
    elif case.command == "check":
        args += CHECK_ARGS

    def alarm(_signum, _frame):
        raise CaseTimeout(f"more than {CASE_SECONDS} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_SECONDS)
    start = time.perf_counter()
    try:
        result = run_main(*args)
    except CaseTimeout as exc:
        return None, [f"timed out: {exc}"]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - start
    if case.command == "rewrite" and case.for_client:   # its choice comes first: stdout, or stderr with JSON
        result = dataclasses.replace(result, **{"stderr" if case.fmt == "json" else "stdout": _without_for_block(
            result.stderr if case.fmt == "json" else result.stdout)})
    problems = []
    said = f"exit {result.returncode}; stderr: {result.stderr.strip()[:600]!r}"
    if result.returncode not in ALLOWED[case.command]:
        problems.append(f"exit code {result.returncode} not in {sorted(ALLOWED[case.command])}")
    if "Traceback" in result.stderr or any(not line.startswith("ovpass: ")
                                           for line in result.stderr.splitlines()):
        problems.append("stderr holds something other than ovpass's own lines")
    if seconds > CASE_SECONDS:
        problems.append(f"took {seconds:.1f} s")
    if tree(source) != before:
        problems.append("the input folder changed")
    made = sorted(p.name for p in tmp.iterdir() if p.name != "in")
    if result.returncode == 2:
        lines = result.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("ovpass: error: "):
            problems.append("an error is not exactly one 'ovpass: error:' line")
        elif not any(name in lines[0] for name in case.damage.names + (str(source),)):
            problems.append(f"the error names none of {', '.join(case.damage.names)}")
        if case.fmt == "json":
            problems += _json_error_problems(result.stdout, lines[0] if lines else "")
        elif result.stdout:
            problems.append("an error printed on stdout")
        if made:
            problems.append(f"left behind: {', '.join(made)}")
    elif result.returncode == 0:
        if case.damage.model_damaged and not _loads(core, target if case.form == "file" else
                                                    source / model_xml(files)):
            problems.append("exit 0, but OpenVINO cannot read the damaged model")
        if case.command == "rewrite" and not made:
            problems.append("exit 0 without an output")
    elif made:
        problems.append(f"left behind: {', '.join(made)}")
    return result.returncode, [f"{p} [{said}]" for p in problems]


def _without_for_block(text: str) -> str:
    """``text`` less the block ``rewrite --for`` prints first: its choice, and the indented lines after it."""
    lines = text.splitlines(keepends=True)
    if lines and lines[0].startswith("--for "):
        lines.pop(0)
        while lines and lines[0].startswith(" "):
            lines.pop(0)
    return "".join(lines)


def _json_error_problems(stdout: str, line: str) -> list[str]:
    try:
        data = json.loads(stdout)
    except ValueError:
        return [f"--format json, but stdout is not JSON: {stdout[:200]!r}"]
    error = data.get("error") if isinstance(data, dict) else None
    if data.get("schema") != "ovpass.error/1" or not isinstance(error, dict) or set(error) != {"code", "message"}:
        return [f"--format json error is not an ovpass.error/1 object: {stdout[:300]!r}"]
    if f"ovpass: error: {error['message']}" != line:
        return ["the JSON error's message is not the stderr line's"]
    return []


def _loads(core: ov.Core, xml: Path) -> bool:
    try:
        core.read_model(str(xml))
    except Exception:  # noqa: BLE001 - whatever OpenVINO raises, it did not read the model
        return False
    return True


def run_cases(seeds, fixtures: tuple[str, ...], tmp: Path,
              core: ov.Core) -> tuple[list[str], Counter[tuple[str, int | None]]]:
    """Run the cases of ``seeds``; the failures (one line each) and the count of each (class, exit code)."""
    failures, counts = [], Counter()
    for seed in seeds:
        case = make_case(seed, fixtures)
        folder = tmp / f"case{seed}"
        folder.mkdir()
        code, problems = run_case(case, folder, core)
        if problems:
            failures.append(f"{case}: {'; '.join(problems)}")
        shutil.rmtree(folder, ignore_errors=True)
        counts[case.damage.kind, code] += 1
    return failures, counts


def assert_every_class_was_tried(counts: Counter) -> None:
    """A fuzz run that damaged nothing, or whose damage never reached ovpass, would pass without checking:
    every class must have given exit 2 (refused), but flipped weights, which OpenVINO reads as any other
    (an IR has no checksum), and which must then have run (exit 0). A flip may still be refused, rightly, where
    it lands in a constant the graph reads as a shape or an index (the slow tier's 3,000 cases of 2026-11-26 had
    one such, seed 2209: 55 bits flipped into the i64 shape that initialises a cache Variable, refused in one
    line): so refusing flipped weights is allowed, not required."""
    refused = {kind for (kind, code) in counts if code == 2}
    assert refused >= set(KINDS) - {"bin_bitflip"}, f"exit 2 by class: {sorted(refused)}: {dict(counts)}"
    assert counts["bin_bitflip", 0] > 0, dict(counts)
    assert sum(n for (_, code), n in counts.items() if code is None) < sum(counts.values()) / 10, dict(counts)


# ------------------------------------------------------------------------------------------ tests

# the default cases in two halves, so that pytest-xdist runs them side by side (each half holds every class of
# damage at least 5 times, the seeds being fixed: each asserts that every class was tried, as the whole did)
HALVES = [range(0, DEFAULT_CASES // 2), range(DEFAULT_CASES // 2, DEFAULT_CASES)]


@pytest.mark.parametrize("seeds", HALVES, ids=[f"seeds{r.start}-{r.stop - 1}" for r in HALVES])
def test_damaged_inputs_never_end_in_an_internal_error(tmp_path, core, seeds):
    failures, counts = run_cases(seeds, DEFAULT_FIXTURES, tmp_path, core)
    assert not failures, f"{len(failures)} of {len(seeds)} cases failed:\n" + "\n".join(failures[:40])
    assert_every_class_was_tried(counts)


# cases the slow tier found, each a defect fixed since, rerun in every form: (seed, fixtures it was drawn from)
FOUND = [(1730, SLOW_FIXTURES)]   # a variable_id changed: read and rewritten, but the serializer refused it


@pytest.mark.parametrize("command, form", [(c, f) for c in FORMATS for f in ("file", "folder")])
@pytest.mark.parametrize("seed, fixtures", FOUND, ids=[str(seed) for seed, _ in FOUND])
def test_the_cases_the_slow_tier_found(tmp_path, core, seed, fixtures, command, form):
    case = dataclasses.replace(make_case(seed, fixtures), command=command, form=form, fmt="text")
    code, problems = run_case(case, tmp_path, core)
    assert not problems, f"{case}: {problems}"


@pytest.mark.slow
def test_damaged_inputs_never_end_in_an_internal_error_slow(tmp_path, core):
    start = time.perf_counter()
    failures, counts = run_cases(range(DEFAULT_CASES, DEFAULT_CASES + SLOW_CASES), SLOW_FIXTURES, tmp_path, core)
    print(f"{SLOW_CASES} cases in {time.perf_counter() - start:.0f} s; by class and exit code: {dict(counts)}")
    assert not failures, f"{len(failures)} of {SLOW_CASES} cases failed:\n" + "\n".join(failures[:60])
    assert_every_class_was_tried(counts)
