"""The shape of the package: what the wheel holds, what importing it pulls in.

The test kit (``testkit/``: graph builders, hypothesis strategies, the runtime-matrix worker, the
in-process CLI runner) lives in the checkout beside ``ovpasses/`` and never in the wheel; importing any
module of the wheel imports neither hypothesis nor pytest (test-only extras).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KIT = "testkit"


def test_the_wheel_holds_the_library_and_the_application_only(tmp_path):
    """Build the wheel as ``pip install .`` does (from a copy of the checkout that still holds the kit)
    and read its file list."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("ovpasses", KIT):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                           "-w", str(tmp_path / "out"), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("ovpasses-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"ovpasses"}, tops
    assert "ovpasses/__init__.py" in names and "ovpasses/app/cli.py" in names
    assert not [name for name in names if "testing" in name.split("/") or KIT in name.split("/")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ovpass = ovpasses.app.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


WHEEL_IMPORTS = """
import importlib, pkgutil, sys
import ovpasses
assert 'hypothesis' not in sys.modules and 'pytest' not in sys.modules, 'import ovpasses'
for module in pkgutil.walk_packages(ovpasses.__path__, 'ovpasses.'):
    importlib.import_module(module.name)
    bad = sorted({'hypothesis', 'pytest', 'testkit'} & {name.split('.')[0] for name in sys.modules})
    assert not bad, (module.name, bad)
print('ok')
"""


def test_importing_the_wheel_imports_no_test_tool(tmp_path):
    """``import ovpasses``, then every module of the package, in a fresh interpreter started outside the
    checkout (so that the kit is not on its path by accident)."""
    proc = subprocess.run([sys.executable, "-c", WHEEL_IMPORTS], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_command_starts_without_the_graph_library(tmp_path):
    """networkx (about 0.13 s of every ``ovpass`` start-up, measured 2026-11-27: 0.59 against 0.50 s for
    ``ovpass --version``) is imported where an analysis graph is made (``inspect --format dot``), not at start-up."""
    proc = subprocess.run([sys.executable, "-c", "import sys, ovpasses, ovpasses.app.cli; "
                           "print(sorted({'networkx'} & set(sys.modules)))"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr[-3000:])


# ------------------------------------------------------------------------------------------------ import graph

# The layers of the package, bottom to top: a module may import its own layer and the layers below it,
# never one above. A module belongs to the longest entry that is its name or a package above it; an entry
# ``P.*`` holds the modules under the package ``P`` but not ``P`` itself (its ``__init__``), which an entry
# ``P`` may put in another layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    # what every layer uses: errors, OpenVINO helpers, the exact CPU config, devices, one timed pass run,
    # the rule protocol every pass follows, the JSON schema ids, the walk over an IR's XML
    ("ovpasses.errors", "ovpasses._ov", "ovpasses._strenum", "ovpasses.precision", "ovpasses.devices",
     "ovpasses.step", "ovpasses.rules", "ovpasses.report.schemas", "ovpasses.modes", "ovpasses.units",
     "ovpasses.ir_xml"),
    ("ovpasses.plan.runtimes",),                          # the facts about runtimes: one typed table
    ("ovpasses.analysis",),                               # walks that return facts
    ("ovpasses.plan",),                                   # profiles, typed decisions, the feature protocol
    ("ovpasses.passes.*", "ovpasses.passes"),             # the transformations several features share
    ("ovpasses.plan.targets",),                           # the facts, the frozen plan, the core's part of it
    ("ovpasses.features",),                               # a home per feature (they never import each other)
    ("ovpasses.registry",),                               # the features composed: the steps, the pass names
    ("ovpasses.options",),                                # what a rewrite is asked to do (names the passes)
    ("ovpasses.summary",),                                # what one run did, as data
    ("ovpasses.pipeline", "ovpasses.compiling"),          # the loop that runs the steps; compile_model
    ("ovpasses.report",),                                 # report data built from a run
    ("ovpasses",),                                        # the package's public names (its __init__ only)
    # the application, itself in layers: the file layer and rendering, the flows, the command
    ("ovpasses.app", "ovpasses.app.files", "ovpasses.app.render"),
    ("ovpasses.app.ir_file", "ovpasses.app.folder", "ovpasses.app.inspect", "ovpasses.app.check",
     "ovpasses.app.bench"),
    ("ovpasses.app.arguments",),                           # the parser of every command
    ("ovpasses.app.cli",),
)
APP = "ovpasses.app"


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / "ovpasses").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Per module of ``ovpasses``, the modules of ``ovpasses`` it imports (at the top, inside functions or
    under ``TYPE_CHECKING``: a reader follows them all). ``from P import N`` is an edge to ``P.N`` where that
    is a module, else to ``P``."""
    modules = _modules()

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {known(a.name) for a in node.names if a.name.split(".")[0] == "ovpasses"}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != "ovpasses":
                    continue
                edges |= {f"{source}.{a.name}" if f"{source}.{a.name}" in modules else known(source)
                          for a in node.names}
        edges.discard(name)
        graph[name] = edges
    return graph


def layer_of(module: str) -> int:
    entries = {entry: index for index, layer in enumerate(LAYERS) for entry in layer}
    name = module
    while True:
        if name != module and f"{name}.*" in entries:
            return entries[f"{name}.*"]
        if name in entries and not (name == "ovpasses" and module != name):
            return entries[name]
        assert "." in name, f"{module} is in no layer of LAYERS: add it there"
        name = name.rpartition(".")[0]


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_circles():
    assert import_cycles(import_graph()) == []


def test_the_library_never_imports_the_application():
    graph = import_graph()
    leaks = sorted((module, target) for module, targets in graph.items() if not module.startswith(APP)
                   for target in targets if target == APP or target.startswith(APP + "."))
    assert leaks == []


def test_no_import_runs_back_up_the_layers():
    graph = import_graph()
    upward = sorted((module, target) for module, targets in graph.items() for target in targets
                    if layer_of(target) > layer_of(module))
    assert upward == [], "imports from a lower layer to a higher one (LAYERS, bottom to top)"


FEATURES = "ovpasses.features"


def feature_of(module: str) -> str | None:
    """The feature a module belongs to (``ovpasses.features.paged_heads.plan`` -> ``paged_heads``), or None."""
    parts = module.split(".")
    return parts[2] if module.startswith(FEATURES + ".") and len(parts) > 2 else None


def test_features_never_import_each_other():
    """A feature stands on the shared layers, never on another feature: each can be read, changed or
    removed alone."""
    graph = import_graph()
    crossing = sorted((module, target) for module, targets in graph.items() if feature_of(module)
                      for target in targets if feature_of(target) not in (None, feature_of(module)))
    assert crossing == []
    features = {feature_of(module) for module in graph} - {None}
    assert {"paged_heads", "sdpa_recovery", "unsharing", "old_runtimes", "sliding_window"} <= features, features
    for feature in features:   # a feature is a folder with an __init__ that says what it is
        assert (ROOT / "ovpasses" / "features" / feature / "__init__.py").read_text().startswith('"""'), feature


# the modules of the core, which run every feature through the registry and know none by name
CORE = ("ovpasses.analysis", "ovpasses.plan", "ovpasses.passes", "ovpasses.rules", "ovpasses.step",
        "ovpasses.options", "ovpasses.pipeline", "ovpasses.compiling")


def _in_core(module: str) -> bool:
    return any(module == core or module.startswith(core + ".") for core in CORE)


def test_the_core_knows_no_feature_by_name():
    """A feature plugs in at one place: the registry. No module of the core imports a feature, and no line of its
    code names a feature's package or one of its passes (a docstring may point a reader at a feature: it is not
    code); ``ovpasses.registry`` imports every feature, one line each."""
    import ast

    import ovpasses.registry

    graph = import_graph()
    assert sorted((m, t) for m, targets in graph.items() if _in_core(m) for t in targets if feature_of(t)) == []
    features = {feature_of(m) for m in graph} - {None}
    passes = {rule.__name__ for f in ovpasses.registry.FEATURES if f.name in features for rule in f.passes}
    modules = _modules()
    named = []
    for module, path in modules.items():
        if not _in_core(module):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in passes:
                named.append((module, node.id))
            elif isinstance(node, ast.Attribute) and node.attr in passes | features:
                named.append((module, node.attr))
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and node.value in passes | features):
                named.append((module, node.value))
    assert named == []
    registered = {feature_of(t) for t in graph["ovpasses.registry"]} - {None}
    assert registered == features
    assert {f.name for f in ovpasses.registry.FEATURES} == features | {"core"}


MAX_MODULE_LINES = 400   # a module longer than this holds more than one concern: split it by what it does
MAX_PIPELINE_LINES = 300   # the executor alone: the steps are the registry's, the work the features'


def test_modules_stay_small():
    """No module of the package over MAX_MODULE_LINES, the pipeline within MAX_PIPELINE_LINES."""
    sizes = {module: len(path.read_text().splitlines()) for module, path in _modules().items()}
    assert len(sizes) > 50 and sizes["ovpasses.pipeline"] > 100   # it read the package's modules
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}
    assert sizes["ovpasses.pipeline"] <= MAX_PIPELINE_LINES


def test_the_import_graph_sees_what_it_checks():
    """The checks above read real edges: a known import of each kind is in the graph, and a circle and an
    upward edge are caught when made up."""
    graph = import_graph()
    assert "ovpasses.pipeline" in graph["ovpasses.app.ir_file"]              # from ovpasses.pipeline import rewrite
    assert "ovpasses.app.files.io" in graph["ovpasses.app.ir_file"]          # from ovpasses.app.files import io
    assert "ovpasses.app.check" in graph["ovpasses.app.cli"]              # from ovpasses.app import check
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("ovpasses.analysis.kv_sharing") < layer_of("ovpasses.passes.sdpa_decomposition")
    assert layer_of("ovpasses.plan.runtimes") < layer_of("ovpasses.analysis") < layer_of("ovpasses.plan.decisions")
    assert layer_of("ovpasses.passes.sdpa_decomposition") <= layer_of("ovpasses.passes") \
        < layer_of("ovpasses.plan.targets") < layer_of("ovpasses.features.paged_heads.plan") \
        < layer_of("ovpasses.registry") < layer_of("ovpasses.options") < layer_of("ovpasses.pipeline")
    assert feature_of("ovpasses.features.paged_heads.plan") == "paged_heads"
    assert feature_of("ovpasses.features") is None and feature_of("ovpasses.plan.targets") is None
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("ovpasses.unlisted")


# ------------------------------------------------------------------------------------------------ Python versions

def _requires_python() -> str:
    """The lowest Python ``pyproject.toml`` declares (``requires-python = ">=3.10"`` -> ``3.10``)."""
    text = (ROOT / "pyproject.toml").read_text()
    (spec,) = [line.split("=", 1)[1].strip().strip('"') for line in text.splitlines()
               if line.startswith("requires-python")]
    assert spec.startswith(">="), spec
    return spec[2:]


def vermin(*paths: Path) -> subprocess.CompletedProcess:
    """vermin (a test extra) over ``paths`` with the declared lowest Python as its target."""
    return subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())",
                           f"--target={_requires_python()}-", "--violations", "--no-tips", *map(str, paths)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_the_package_needs_no_newer_python_than_it_declares():
    result = vermin(Path("ovpasses"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


def test_vermin_refuses_a_newer_construct(tmp_path):
    """The check above can fail: a construct of 3.11 (what plan/decisions.py once used) is refused."""
    newer = tmp_path / "newer.py"
    newer.write_text("from enum import StrEnum\n\n\nclass Mode(StrEnum):\n    KEEP = 'keep'\n")
    result = vermin(newer)
    assert result.returncode != 0 and "StrEnum" in result.stdout, result.stdout


def test_decision_enums_read_the_same_on_every_python():
    """``plan.decisions``' enums are ``str`` and render as their value (as ``enum.StrEnum`` did): the JSON
    reports and the text that formats them are unchanged."""
    import json

    from ovpasses.features.sliding_window.plan import MaskAction
    from ovpasses.plan.decisions import Action, Lowered

    for member in (Action.BARRIER, MaskAction.SLICE, Lowered.CONSTANT_FOLDED):
        assert isinstance(member, str) and member == member.value
        assert str(member) == f"{member}" == "%s" % member == member.value
        assert json.dumps({member: member}) == json.dumps({member.value: member.value})
        assert type(member)(member.value) is member


def test_the_licence_file_matches_the_declared_licence_and_the_changelog_names_the_version():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence and "END OF TERMS AND CONDITIONS" in licence
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {project['version']}" in changelog


def test_the_library_infers_through_one_helper():
    """Every inference the package runs goes through ``ovpasses._ov.infer`` (start_async and wait): a synchronous
    ``InferRequest.infer`` on one inference thread returns from a failed inference without an error
    (``tests/test_regressions.py::test_plugin_sync_infer_on_one_thread_hides_the_error``)."""
    calls, helper_calls = [], 0
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr == "infer":   # request.infer(...)
                calls.append(f"{module}:{node.lineno}")
            elif isinstance(node.func, ast.Name) and node.func.id == "infer":      # the helper
                helper_calls += 1
    assert calls == []
    assert helper_calls >= 3   # check, bench's worker, the trimmer's prefill
