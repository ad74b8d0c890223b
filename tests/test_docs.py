"""The docs as a user meets them: every ```python block runs as written, and every relative link resolves.

Snippets: the ```python blocks of README.md and docs/**/*.md run in the order they appear, one namespace per
page (a page's later block may use what an earlier one defined, as a reader would), in a temporary folder
that holds a fixture export twice: as ``openvino_model.xml`` (+ ``.bin``) and as the folder ``exported/``
(``tests/fixtures/gemma4/tiny8``). A block that is not meant to run is preceded by the line
``<!-- not-run: reason -->``; few are, and each says why.

Links: every ``[text](target)`` outside code in README.md, docs/**/*.md and benchmarks/records/*.md whose
target is not a URL names a file or folder that exists, and a ``#anchor`` names a heading of that page
(GitHub's slugs).
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "gemma4" / "tiny8"
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(\S.*?)\s*-->")
MAX_NOT_RUN = 3


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _linked_pages() -> list[Path]:
    return [*_doc_pages(), *sorted((ROOT / "benchmarks" / "records").glob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, source, not-run reason or None) of each ```python block of a markdown text."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise AssertionError(f"line {start + 1}: a ```python block that is never closed")
            previous = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = NOT_RUN.search(previous)
            blocks.append((start + 1, "\n".join(lines[start + 1:j]) + "\n", marker.group(1) if marker else None))
            i = j + 1
        else:
            i += 1
    return blocks


SNIPPET_PAGES = [page for page in _doc_pages()
                 if any(reason is None for _, _, reason in python_blocks(page.read_text()))]
ALL_BLOCKS = [(page, line, reason) for page in _doc_pages() for line, _, reason in python_blocks(page.read_text())]


def test_the_snippet_test_sees_the_readme_and_marks_few_blocks_not_run():
    pages = {_rel(page) for page in SNIPPET_PAGES}
    assert "README.md" in pages, "README.md has no ```python block: the quickstart's library part is missing"
    skipped = [(_rel(page), line, reason) for page, line, reason in ALL_BLOCKS if reason is not None]
    assert len(skipped) <= MAX_NOT_RUN, f"too many blocks marked not-run (at most {MAX_NOT_RUN}): {skipped}"


@pytest.fixture
def snippet_dir(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("openvino_model.xml", "openvino_model.bin"):
        shutil.copy2(FIXTURE / name, work / name)
    shutil.copytree(FIXTURE, work / "exported")
    return work


# Runs a page's blocks in one fresh interpreter, as a reader pastes them: nothing another test imported
# (``ovpasses.files.folder``, say) can make a block pass that fails after a plain ``import ovpasses``.
RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__main__"}
for page, fence_line, source in json.load(open(sys.argv[1])):
    try:
        exec(compile(source, page, "exec"), namespace)
    except BaseException as error:
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == page]
        where = f"line {fence_line + lines[-1]}" if lines else f"the block at line {fence_line}"
        print(f"{page}, {where}: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
print(len(namespace) > 1 and "ran")
"""


@pytest.mark.parametrize("page", SNIPPET_PAGES, ids=_rel)
def test_python_snippets_run_as_written(page: Path, snippet_dir: Path):
    blocks = [(_rel(page), line, source)
              for line, source, not_run in python_blocks(page.read_text()) if not_run is None]
    (snippet_dir.parent / "blocks.json").write_text(json.dumps(blocks))
    run = subprocess.run([sys.executable, "-c", RUNNER, str(snippet_dir.parent / "blocks.json")],
                         cwd=snippet_dir, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{_rel(page)}: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else run}"
    assert run.stdout.strip().endswith("ran")


LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def _prose(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            found.add(slug(match.group(1)))
    return found


def test_slug_is_githubs():
    assert slug("Operations newer than a release") == "operations-newer-than-a-release"
    assert slug("`--runtime OLD`: an IR for a release") == "--runtime-old-an-ir-for-a-release"
    assert slug("2026.2.1 and norms") == "202621-and-norms"


@pytest.mark.parametrize("page", _linked_pages(), ids=_rel)
def test_relative_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading '#{anchor}' in {_rel(resolved)}")
    assert not broken, f"{_rel(page)}: " + "; ".join(broken)


def test_readme_and_guides_stay_short_and_measurement_diaries_stay_in_records():
    """Issue 29's shape: README and each guide at most 150 lines; load figures belong in dated records."""
    too_long = [f"{_rel(page)}: {len(page.read_text().splitlines())} lines"
                for page in [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
                if len(page.read_text().splitlines()) > 150]
    assert not too_long, too_long
    assert sorted((ROOT / "docs" / "guides").glob("*.md")), "docs/guides/ is empty"
    diaries = [f"{_rel(page)}:{number}" for page in _doc_pages()
               for number, line in enumerate(page.read_text().splitlines(), 1) if "load average" in line.lower()]
    assert not diaries, f"load figures in docs (move them to benchmarks/records/): {diaries}"
    misnamed = [_rel(page) for page in (ROOT / "benchmarks" / "records").glob("*.md")
                if page.name != "README.md" and not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9.-]+\.md", page.name)]
    assert not misnamed, f"records are named YYYY-MM-DD-topic.md: {misnamed}"


DOTTED = re.compile(r"\b((?:ovpasses|testkit)(?:\.[A-Za-z_]\w*)+)")
REPO_PATH = re.compile(r"`((?:ovpasses|testkit|tests|tools|benchmarks)/[\w./-]+)`")


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("page", _doc_pages(), ids=_rel)
def test_names_and_paths_in_docs_exist(page: Path):
    """Every ``ovpasses.x.y`` a page names imports (module or attribute), and every repository path it
    names in backticks exists: docs follow the code when modules move. Records are dated and keep the
    names of their day."""
    text = page.read_text()
    missing = [name for name in sorted(set(DOTTED.findall(text))) if not _resolves(name)]
    missing += [path for path in sorted(set(REPO_PATH.findall(text))) if not (ROOT / path).exists()]
    assert not missing, f"{_rel(page)} names what the code no longer has: {missing}"


def test_docs_pages_the_code_names_exist():
    """A docstring, comment or message that sends the reader to ``docs/....md`` or a record names a page that
    exists (pages move: the guides replaced docs/sliding_window.md and its kin)."""
    named = re.compile(r"\b((?:docs|benchmarks/records)/[\w./-]+?\.md)\b")
    missing = []
    for folder in ("ovpasses", "testkit", "tools", "benchmarks", "tests"):
        for source in sorted((ROOT / folder).rglob("*.py")):
            if source == Path(__file__).resolve():
                continue
            for page in sorted(set(named.findall(source.read_text()))):
                if not (ROOT / page).exists():
                    missing.append(f"{_rel(source)}: {page}")
    assert not missing, missing


def test_the_library_names_docs_pages_not_readme_sections():
    """README is the front door and its sections move (issue 29 made guides of them); a docstring, comment or
    message of the library names a docs/ page or a record, which the test above checks, not a README section."""
    naming = [f"{_rel(source)}:{number}" for source in sorted((ROOT / "ovpasses").rglob("*.py"))
              for number, line in enumerate(source.read_text().splitlines(), 1) if re.search(r"\bREADME\b", line)]
    assert not naming, naming
