"""Runtime profiles: which names are releases, which releases ovpasses prepares IRs for, and the facts in
ovpasses.plan.runtimes against the measurement they come from."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import openvino as ov
import pytest

import ovpasses
from ovpasses import OvpassesError, UnsupportedRuntimeError
from ovpasses.plan.runtimes import (
    FIRST_FIXED,
    HIGHEST_OPSET,
    IR_VERSIONS_MEASURED_ON,
    IR_VERSIONS_READ,
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    OPS_FIRST_READ,
    RELEASES,
    first_release_reading,
    installed_version,
    parse_release,
    reads_op,
)
from testkit.graphs import AttentionSpec, StackSpec, build_attention, build_stack

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "benchmarks" / "results" / "runtime_matrix.json"
OPSET_FACTS = ROOT / "benchmarks" / "results" / "opset_facts.json"


@pytest.mark.parametrize("runtime, version, profile", [
    ("2025.2", (2025, 2, 0), "affected"),
    ("2026.0", (2026, 0, 0), "affected"),
    ("2026.1.0", (2026, 1, 0), "affected"),
    ("2026.2.1", (2026, 2, 1), "fixed"),
    (" 2026.4.1 ", (2026, 4, 1), "fixed"),
    ("2026.4.1-22982-e213a147257-releases/2026/4", (2026, 4, 1), "fixed"),  # as openvino.get_version() says it
])
def test_release_names_give_their_profile(runtime, version, profile):
    got = ovpasses.profile_for(runtime)
    assert (got.version, got.name) == (version, profile)


@pytest.mark.parametrize("runtime", ["2026.0.0.1", "2026", "abc", "", "2026.x", "v2026.0"])
def test_names_that_are_not_releases_are_refused(runtime):
    with pytest.raises(UnsupportedRuntimeError,
                       match="is not an OpenVINO release; name one by its version, YEAR.MINOR"):
        ovpasses.profile_for(runtime)


@pytest.mark.parametrize("runtime", ["2024.6", "2025.1.0"])
def test_a_target_older_than_supported_is_refused_without_install_advice(runtime):
    with pytest.raises(UnsupportedRuntimeError) as raised:
        ovpasses.profile_for(runtime)
    assert "prepares IRs for openvino 2025.2 and newer" in str(raised.value)
    assert "install" not in str(raised.value)  # the user named a target; what is installed is not at fault


@pytest.mark.parametrize("runtime", [2026, 2026.0, (2026, 0, 0), b"2026.0"])
def test_a_runtime_that_is_not_a_string_is_refused(runtime):
    with pytest.raises(OvpassesError, match="runtime must be a release name such as '2026.0'"):
        ovpasses.rewrite(build_stack(StackSpec()), runtime=runtime)


def test_a_target_newer_than_every_known_release_warns_once(caplog):
    caplog.set_level(logging.WARNING, logger="ovpasses")
    assert ovpasses.profile_for("2099.1").name == "fixed"
    ovpasses.profile_for("2099.1")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "2099.1.0 is newer than every release" in warnings[0].getMessage()
    assert "applying the fixed profile" in warnings[0].getMessage()
    caplog.clear()
    ovpasses.profile_for(".".join(map(str, NEWEST_KNOWN)))
    assert not caplog.records


def test_the_installed_runtime_is_a_supported_release():
    assert ovpasses.profile_for().version == installed_version() >= OLDEST_SUPPORTED


def test_release_facts_agree_with_the_recorded_runtime_matrix():
    """RELEASES says which releases lose the fixtures' KV state unmodified; the record of
    tools/runtime_matrix.py is the measurement, and the profile boundaries must follow it."""
    rows = json.loads(MATRIX.read_text())
    measured = {}
    for row in rows:
        if row["mode"] == "unmodified" and row["path"] == "core" and row["fixture"] == "tiny8":
            measured[row["runtime"]] = row["status"] == "failed" and "null input states" in row["error"]
    facts = {r.version_string: r.shared_kv_failure for r in RELEASES if r.shared_kv_failure is not None}
    assert facts == measured
    for release in RELEASES:
        if release.shared_kv_failure is not None:
            assert release.shared_kv_failure == (OLDEST_SUPPORTED <= release.version < FIRST_FIXED)
    assert [r.version for r in RELEASES] == sorted(r.version for r in RELEASES)
    assert RELEASES[0].version == OLDEST_SUPPORTED and RELEASES[-1].version == NEWEST_KNOWN


@pytest.mark.skipif(installed_version() not in IR_VERSIONS_MEASURED_ON,
                    reason="IR_VERSIONS_READ was measured on other releases")
@pytest.mark.parametrize("version", [9, 10, 11, 12])
def test_ir_versions_read_as_measured(tmp_path, version):
    """The fact io.check_ir_file acts on: the installed OpenVINO reads exactly IR_VERSIONS_READ. If this
    fails, re-measure (see ovpasses.plan.runtimes) and update the data."""
    path = tmp_path / "attention.xml"
    ov.save_model(build_attention(AttentionSpec()), path, compress_to_fp16=False)
    text = path.read_text()
    assert '<net name="attention" version="11">' in text   # what save_model writes
    path.write_text(text.replace('version="11"', f'version="{version}"', 1))
    try:
        ov.Core().read_model(path)
        reads = True
    except RuntimeError:
        reads = False
    assert reads == (version in IR_VERSIONS_READ)


def test_op_version_facts_agree_with_the_recorded_measurement():
    """OPS_FIRST_READ and HIGHEST_OPSET against the record of tools/opset_facts.py: for every measured
    release and every operation version some release does not read, reads_op says what was measured;
    the IR versions too."""
    record = json.loads(OPSET_FACTS.read_text())
    rows = {parse_release(r["runtime"]): r for r in record["runtimes"]}
    assert set(rows) == set(HIGHEST_OPSET) == set(IR_VERSIONS_MEASURED_ON)
    judged = {tuple(p) for r in rows.values() for p in r["not_read"]} | set(OPS_FIRST_READ)
    assert judged == set(OPS_FIRST_READ)   # every measured refusal is in the data
    for version, row in rows.items():
        assert HIGHEST_OPSET[version] == row["python_opsets"] == max(row["reader_opsets"])
        assert row["reader_opsets"] == list(range(1, HIGHEST_OPSET[version] + 1))
        assert tuple(row["ir_versions_read"]) == IR_VERSIONS_READ and row["save_model_ir_version"] == 11
        not_read = {tuple(p) for p in row["not_read"]}
        for type_name, opset in judged:
            assert reads_op(version, type_name, opset) == ((type_name, opset) not in not_read), (version, type_name)
        saved = {name.split("-")[0]: text == "read" for name, text in row["saved_by_newest"].items()}
        assert saved == {t: reads_op(version, t, o) for t, o in OPS_FIRST_READ if t in saved}
    # the first release that reads a version is the first measured one that does
    for (type_name, opset), first in OPS_FIRST_READ.items():
        readers = sorted(v for v, row in rows.items() if [type_name, opset] not in row["not_read"])
        assert first == readers[0] and readers == [v for v in sorted(rows) if v >= first]


@pytest.mark.parametrize("runtime, readable", [
    ((2025, 2, 0), {"ErfInv": False, "OneHot": False, "Add": True}),
    ((2025, 3, 0), {"ErfInv": False, "OneHot": False, "Add": True}),   # not measured: as 2025.2.0
    ((2026, 0, 0), {"ErfInv": False, "OneHot": True, "Add": True}),
    ((2026, 2, 0), {"ErfInv": False, "OneHot": True, "Add": True}),    # not measured: as 2026.1.0
    ((2026, 2, 1), {"ErfInv": True, "OneHot": True, "Add": True}),
    ((2099, 1, 0), {"ErfInv": True, "OneHot": True, "Add": True}),     # newer than measured: reads all
])
def test_reads_op_between_and_beyond_the_measured_releases(runtime, readable):
    versions = {"ErfInv": "opset17", "OneHot": "opset16", "Add": "opset1"}
    assert {t: reads_op(runtime, t, versions[t]) for t in readable} == readable
    assert reads_op(runtime, "SomeExtensionOp", "extension")        # not an opset: not judged here
    assert reads_op(runtime, "Future", "opset18") == (runtime > NEWEST_KNOWN)
    assert first_release_reading("Future", "opset18") is None
    assert first_release_reading("Add", "opset1") == OLDEST_SUPPORTED
