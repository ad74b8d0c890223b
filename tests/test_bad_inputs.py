"""Issue 31, as a new user met it: a damaged file inside an export folder, ``--debug``, ``-o`` over an existing
pair, ``--format json`` errors, the weights file given for the IR, a missing path, and the text a person
reads (line width, sizes, what ``inspect DIR`` skipped). Each test is one defect found on 2026-11-26; the
classes of damage as a whole are fuzzed in tests/test_fuzz_inputs.py.

``ovpass`` runs in this process (``run_main``): none of these needs a process of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ovpasses.errors import ErrorCode
from ovpasses.report import schemas
from ovpasses.units import size_text
from testkit.cli import run_main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
TINY8 = FIXTURES / "gemma4" / "tiny8"
VLM8 = FIXTURES / "gemma4" / "vlm8"
E2B35 = FIXTURES / "gemma4" / "e2b35"
WIDTH = 100
EXTRA = {"inspect": [], "rewrite": ["--dry-run"], "check": ["--steps", "1", "--prefill", "2"]}


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(result, *words: str) -> str:
    """The one ``ovpass: error:`` line of an exit 2, holding ``words``."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ovpass: error: "), result.stderr
    assert "Traceback" not in result.stderr and all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def export(tmp_path) -> Path:
    folder = tmp_path / "export"
    shutil.copytree(TINY8, folder)
    return folder


# ------------------------------------------------------------------------------------------ damaged folders

@pytest.mark.parametrize("command", ["inspect", "rewrite", "check"])
def test_a_truncated_xml_inside_a_folder_is_one_line_naming_it(export, tmp_path, command):
    """Was exit 3, 'unexpected ParseError: no element found: line 10396', no file named."""
    model = export / "openvino_model.xml"
    model.write_bytes(model.read_bytes()[:268472])
    before = tree(export)
    args = ["-o", tmp_path / "out"] if command == "rewrite" else EXTRA[command]
    one_error_line(run_main(command, export, *args), str(model), "the XML ends early", "truncated")
    assert tree(export) == before and sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize("damage, words", [
    (lambda f: (f / "openvino_tokenizer.xml").write_bytes((f / "openvino_tokenizer.xml").read_bytes()[:5000]),
     ["openvino_tokenizer.xml", "the XML ends early"]),
    (lambda f: (f / "openvino_detokenizer.bin").write_bytes(b"\0" * 10),
     ["openvino_detokenizer.xml", "openvino_detokenizer.bin is shorter than the XML expects", "10 bytes"]),
    (lambda f: (f / "config.json").write_text('{"vocab_size": 256,'), ["config.json", "not valid JSON"]),
    (lambda f: (f / "config.json").write_text("[1, 2]"), ["config.json", "a JSON list, not an object"]),
    (lambda f: (f / "openvino_tokenizer.xml").unlink(),
     ["openvino_tokenizer.bin", "openvino_tokenizer.xml is missing"]),
], ids=["truncated tokenizer IR", "short detokenizer weights", "truncated config.json", "config.json a list",
        "tokenizer .xml missing"])
def test_a_damaged_file_a_client_reads_refuses_the_folder(export, tmp_path, damage, words):
    """The rewrite copied these as they were (a client then fails on them); now every command names them."""
    damage(export)
    before = tree(export)
    for command in ("inspect", "rewrite", "check"):
        args = ["-o", tmp_path / "out"] if command == "rewrite" else EXTRA[command]
        one_error_line(run_main(command, export, *args), *words)
    assert tree(export) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["inspect", "rewrite", "check"])
def test_a_name_that_is_not_utf8_is_one_line_not_a_decode_error(export, tmp_path, command):
    """Found by the fuzz test (seed 633): OpenVINO's reader takes any byte in a name, and the pipeline's first
    get_friendly_name() raised UnicodeDecodeError (exit 3)."""
    model = export / "openvino_model.xml"
    data = model.read_bytes()
    at = data.index(b'name="Constant_38855"') + len(b'name="Constant_3885')
    model.write_bytes(data[:at] + b"\xf4" + data[at + 1:])
    args = ["-o", tmp_path / "out.xml"] if command == "rewrite" else EXTRA[command]
    one_error_line(run_main(command, model, *args), f"{model}: byte {at} is not UTF-8 text")


def test_a_static_input_too_large_to_run_is_inconclusive_not_a_crash(export):
    """A damaged dim that OpenVINO reads: compiling a static attention_mask of 2**28 tokens took 4 GiB."""
    model = export / "openvino_model.xml"
    text = model.read_text()
    at = text.index('name="attention_mask" type="Parameter"')
    model.write_text(text[:at] + text[at:].replace('shape="?,?"', f'shape="1,{2**40}"', 1))
    result = run_main("check", model, *EXTRA["check"], "--format", "json")
    assert result.returncode == 4, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert "no model was run: input attention_mask is [1,1099511627776] in the IR, at least 8.00 TiB" in verdict


# ------------------------------------------------------------------------------------------ the CLI's answers

def test_debug_keeps_the_exit_code_of_an_internal_failure(monkeypatch):
    """Was: --debug re-raised, and Python's exit 1 read as 'check: WORSE'."""
    from ovpasses.app import cli

    def broken(args):
        raise ValueError("a defect of ovpass")
    monkeypatch.setitem(cli.COMMANDS, "passes", broken)
    plain = run_main("passes")
    assert plain.returncode == 3 and "Traceback" not in plain.stderr
    assert plain.stderr == "ovpass: error: unexpected ValueError: a defect of ovpass (rerun with --debug for the traceback)\n"
    debug = run_main("--debug", "passes")
    assert debug.returncode == 3 and debug.stderr.startswith("Traceback")
    assert debug.stderr.splitlines()[-1] == "ovpass: error: unexpected ValueError: a defect of ovpass"


def test_o_over_an_existing_pair_says_replaced_and_warns_inside_another_export(tmp_path):
    """Was: 'wrote', and a Gemma 2 IR left beside Gemma 3's config.json without a word."""
    source = tmp_path / "mine" / "openvino_model.xml"
    shutil.copytree(TINY8, source.parent)
    other = tmp_path / "other_export"
    shutil.copytree(TINY8, other)
    (other / "config.json").write_text('{"model_type": "another"}\n')
    affected = ["--runtime", "2026.0"]   # a rewrite that changes the IR (on the installed runtime it may not)
    new = run_main("rewrite", source, "-o", tmp_path / "new.xml", *affected)
    assert new.returncode == 0 and new.stderr == ""
    assert new.stdout.splitlines()[-1] == f"wrote {tmp_path / 'new.xml'} and new.bin"
    again = run_main("rewrite", source, "-o", tmp_path / "new.xml", "--format", "json", *affected)
    assert again.returncode == 0 and again.stderr == "" and json.loads(again.stdout)["replaced"] is True
    into = run_main("rewrite", source, "-o", other / "openvino_model.xml", *affected)
    assert into.returncode == 0
    assert into.stdout.splitlines()[-1] == f"replaced {other / 'openvino_model.xml'} and openvino_model.bin"
    warning, = into.stderr.splitlines()
    assert warning.startswith(f"ovpass: warning: {other / 'openvino_model.xml'}: replaced an IR of the export "
                              f"folder {other}, whose config.json and other files stay as they were")
    beside = run_main("rewrite", source, "-o", source.parent / "copy.xml", *affected)   # the input's own folder: no warning
    assert beside.returncode == 0 and beside.stderr == ""


@pytest.mark.parametrize("args, code", [
    (("inspect", "{tmp}/nowhere.xml"), ErrorCode.INPUT),
    (("rewrite", "{tiny8}/openvino_model.xml", "-o", "{tmp}/out.txt"), ErrorCode.OUTPUT),
    (("rewrite", "{tiny8}/openvino_model.xml"), ErrorCode.USAGE),
    (("check", "{tiny8}/openvino_model.xml", "--steps", "-1"), ErrorCode.USAGE),   # argparse's own
    (("inspect", "{tiny8}/openvino_model.xml", "--runtime", "2024.6"), ErrorCode.UNSUPPORTED_RUNTIME),
    (("check", "{tiny8}/openvino_model.xml", "--device", "XPU"), ErrorCode.DEVICE),
], ids=["input", "output", "usage", "argparse", "runtime", "device"])
def test_json_errors_are_an_error_object(tmp_path, args, code):
    """Was: plain text on stderr, nothing on stdout, under --format json."""
    args = [a.format(tmp=tmp_path, tiny8=TINY8) for a in args]
    result = run_main(*args, "--format", "json")
    line = one_error_line(result)
    data = json.loads(result.stdout)
    assert data == {"schema": schemas.ERROR, "error": {"code": code.value, "message": line[len("ovpass: error: "):]}}
    assert run_main(*args).stdout == ""   # text: stderr only


def test_the_weights_file_given_for_the_ir_says_so():
    """Was: 'not an XML file (not well-formed (invalid token): line 1, column 0)'."""
    one_error_line(run_main("inspect", TINY8 / "openvino_model.bin"),
                   "openvino_model.bin: that is the weights file of an IR; give its .xml (openvino_model.xml)")


def test_a_missing_path_asks_for_an_ir_or_a_folder(tmp_path):
    """Was: 'give the path of an OpenVINO IR .xml file', when a folder is taken too."""
    one_error_line(run_main("check", tmp_path / "gone"), "no such file or folder; give the path of an OpenVINO IR "
                                                        ".xml file or of an export folder")


# ------------------------------------------------------------------------------------------ text a person reads

def _fits(text: str) -> list[str]:
    """The lines wider than the output's width, but for one word alone (a node name is not split)."""
    return [line for line in text.splitlines() if len(line) > WIDTH and len(line.split()) > 1]


@pytest.mark.parametrize("source, options", [
    (TINY8 / "openvino_model.xml", ["--runtime", "2026.0"]),
    (TINY8 / "openvino_model.xml", ["--kv-sharing", "unshare", "--sliding-window", "bounded"]),
    (E2B35 / "openvino_model.xml", ["--paged-heads", "pad", "--runtime", "2026.0"]),
    (VLM8, []),
], ids=["tiny8 affected", "tiny8 unshare bounded", "e2b35 padded", "vlm8 folder"])
def test_text_output_fits_100_columns(source, options):
    """Was: lines up to 203 characters."""
    for command in ("inspect", "rewrite", "check"):
        verbose = ["--verbose"] if command == "inspect" else []
        result = run_main(command, source, *options, *EXTRA[command], *verbose)
        assert result.returncode in ((0, 4) if command == "check" else (0,)), result.stderr   # 4: bound not reached
        assert _fits(result.stdout) == [], f"{command}: {_fits(result.stdout)}"
    assert _fits(run_main("passes").stdout) == []


def test_sizes_are_in_kib_mib_gib():
    """Was: KV sizes in raw bytes ('12582912')."""
    result = run_main("inspect", TINY8 / "openvino_model.xml", "--sliding-window", "bounded",
                      "--kv-sharing", "unshare")
    assert result.returncode == 0, result.stderr
    data = json.loads(run_main("inspect", TINY8 / "openvino_model.xml", "--sliding-window", "bounded",
                               "--kv-sharing", "unshare", "--format", "json").stdout)
    kv = data["kv_bytes"]
    assert str(kv["full"]) not in result.stdout and str(kv["bounded"]) not in result.stdout
    assert "MiB" in result.stdout and "KiB" in result.stdout
    assert f"{size_text(data['extra_cache_bytes_per_token'])} per token of context" in result.stdout
    assert [size_text(n) for n in (1000, 1536, 12582912, 3 * 2**30)] == ["1000 bytes", "1.5 KiB", "12.0 MiB",
                                                                        "3.00 GiB"]


def test_inspect_and_check_of_a_folder_say_what_they_skipped_and_why(export):
    """Was: IRs without stateful attention silently left out."""
    (export / "notes.xml").write_text('<?xml version="1.0"?>\n<notes>not an IR</notes>\n')
    skipped = [{"file": "notes.xml", "reason": "not_an_ir"},
               {"file": "openvino_detokenizer.xml", "reason": "no_stateful_attention"},
               {"file": "openvino_tokenizer.xml", "reason": "no_stateful_attention"}]
    text = run_main("inspect", export)
    assert text.returncode == 0, text.stderr
    last = " ".join(text.stdout.split("\n\n")[-1].split())   # the paragraph, wrapped at 100 columns
    assert last == ("skipped: notes.xml (XML, not an IR), openvino_detokenizer.xml (no stateful attention), "
                    "openvino_tokenizer.xml (no stateful attention)")
    assert json.loads(run_main("inspect", export, "--format", "json").stdout)["skipped"] == skipped
    check = run_main("check", export, *EXTRA["check"], "--format", "json")
    assert check.returncode == 0 and json.loads(check.stdout)["skipped"] == skipped
