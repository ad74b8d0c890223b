"""The shape of the package: what the wheel holds, what importing it pulls in.

The test kit (``testkit/``: graph builders, hypothesis strategies, the runtime-matrix worker, the
in-process CLI runner) lives in the checkout beside ``ovpasses/`` and never in the wheel; importing any
module of the wheel imports neither hypothesis nor pytest (test-only extras).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

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
    assert "ovpasses/__init__.py" in names and "ovpasses/cli.py" in names
    assert not [name for name in names if "testing" in name.split("/") or KIT in name.split("/")]
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ovpass = ovpasses.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


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
