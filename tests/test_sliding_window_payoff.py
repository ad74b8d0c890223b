"""When a sliding-window mode pays (issue 32: ``rewrite`` and ``inspect`` say at which context a mode starts to
pay, from the benchmark): the KV figure from the plan, the advice from what the plugin fuses natively, the decode
figures from the records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import openvino as ov
import pytest

import ovpasses
from ovpasses.app import cli
from ovpasses.app.render.text import payoff_lines
from ovpasses.features.sliding_window.payoff import MEASURED, UNSHARED_WHOLE, Advice, payoff
from ovpasses.modes import SlidingWindow
from testkit.cli import unwrapped

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def _summary(fixture: str, mode: str):
    return ovpasses.rewrite(ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml"), sliding_window=mode)


def test_every_measured_row_is_in_its_record():
    for row in MEASURED:
        text = (ROOT / row.record).read_text()
        assert f"{row.decode:.2f}" in text, (row, "figure not in its record")
        assert f"{row.context:,}" in text or str(row.context) in text


def test_every_unshared_row_is_in_its_record():
    for row in UNSHARED_WHOLE:
        text = (ROOT / row.record).read_text()
        figures = ([f"{row.peak:.3f}x", f"{row.context_memory:.2f}x"] if row.peak is not None
                   else [f"{row.peak_mib:,}", f"{row.memory_gib} GiB"])
        assert all(f in text for f in figures) and f"{row.context:,}" in text, (row, "figure not in its record")


def test_unsharing_is_advised_fed_whole_where_sliding_layers_read_shared_caches(capsys):
    """e2b35 keeps 4 shared caches, whose readers the plugin leaves unfused: fed whole they hold their scores whole,
    and --kv-sharing unshare fuses them (measured at E2B widths). Not said once unshared, nor where nothing is
    shared (Gemma 3), nor for a mode no such row was measured for (bounded)."""
    payoff = _summary("gemma4/e2b35", "trimmable").sliding_window_payoff
    assert payoff.shared_caches == 4 and payoff.unshared_whole == UNSHARED_WHOLE
    report = payoff.to_dict()
    assert report["shared_caches"] == 4 and [r["context"] for r in report["unshared_whole"]] == [2048, 4096, 8192, 16384]
    unshared = ovpasses.rewrite(ov.Core().read_model(FIXTURES / "gemma4/e2b35/openvino_model.xml"),
                                sliding_window="trimmable", kv_sharing="unshare").sliding_window_payoff
    assert unshared.shared_caches == 0 and unshared.unshared_whole == ()
    assert _summary("gemma3/text6", "trimmable").sliding_window_payoff.shared_caches == 0
    assert _summary("gemma4/e2b35", "bounded").sliding_window_payoff.unshared_whole == ()
    assert cli.main(["inspect", str(FIXTURES / "gemma4" / "e2b35"), "--sliding-window", "trimmable"]) == 0
    text = "\n".join(unwrapped(capsys.readouterr().out))
    assert "the layers that read the 4 shared caches run outside the CPU plugin's fused kernel" in text
    assert "--kv-sharing unshare fuses every layer" in text and "9,470 MiB peak RSS" in text
    assert cli.main(["inspect", str(FIXTURES / "gemma4" / "e2b35"), "--sliding-window", "trimmable",
                     "--kv-sharing", "unshare"]) == 0
    assert "--kv-sharing unshare fuses every layer" not in "\n".join(unwrapped(capsys.readouterr().out))


def test_bounding_caches_the_plugin_fuses_natively_is_advised_against():
    """Gemma 3's sliding caches are all fused as exported: bounded takes them out of the kernel (slower)."""
    payoff = _summary("gemma3/text6", "bounded").sliding_window_payoff
    assert payoff.advice is Advice.PREFER_TRIMMABLE and payoff.natively_fused == payoff.caches == 10   # K and V of 5 sliding layers
    assert payoff.kv_from == 8 and all(m.decode > 1 for m in payoff.measured) and payoff.decode_from is None
    trimmable = _summary("gemma3/text6", "trimmable").sliding_window_payoff
    assert trimmable.advice is Advice.PAYS and trimmable.kv_from == 8 and trimmable.decode_from == 2048


def test_bounding_pays_where_the_native_path_leaves_sliding_caches_unfused():
    """e2b35: some sliding caches are shared (the plugin leaves them unfused natively): bounded pays."""
    summary = _summary("gemma4/e2b35", "bounded")
    payoff = summary.sliding_window_payoff
    assert payoff.advice is Advice.PAYS and payoff.natively_fused < payoff.caches
    assert payoff.decode_from == 2048 and {m.widths for m in payoff.measured} == {"Gemma 4 E2B"}
    assert summary.to_dict()["sliding_window_payoff"]["advice"] == "pays"
    assert _summary("gemma4/e2b35", "full").sliding_window_payoff is None


@pytest.mark.parametrize("command", ["inspect", "rewrite"])
def test_rewrite_and_inspect_say_when_the_mode_pays(command, capsys, tmp_path):
    args = [command, str(FIXTURES / "gemma3" / "text6"), "--sliding-window", "bounded"]
    args += ["--dry-run"] if command == "rewrite" else []
    assert cli.main(args) == 0
    text = "\n".join(unwrapped(capsys.readouterr().out))
    assert "pays from: less KV than unmodified once the context passes 7 positions" in text
    assert "--sliding-window trimmable keeps them fused" in text
    assert cli.main(args + ["--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    model = report["models"][0] if "models" in report else report
    payoff = (model.get("summary") or model.get("report"))["sliding_window_payoff"]
    assert payoff["advice"] == "prefer_trimmable" and payoff["kv_from"] == 8


def test_rewrite_says_which_client_gets_what_from_the_trimmable_form(capsys):
    """The trimmable form serves two kinds of client differently: the rewrite says which gets what."""
    assert cli.main(["rewrite", str(FIXTURES / "gemma3" / "text6"), "--dry-run", "--sliding-window", "trimmable"]) == 0
    text = "\n".join(unwrapped(capsys.readouterr().out))
    assert "ov.Core / optimum-intel with ovpasses.features.sliding_window.trim: each sliding cache cut" in text
    assert "openvino_genai (stateful or paged), or a program that does not trim: nothing trims" in text


def test_the_rewrite_json_gives_trimmable_caches_as_held_until_trimmed():
    """The JSON summary's held KV of trimmable caches is the trimmable figure (whole until the program trims, then
    keep positions), not the bounded one (which counts them as plain states, double-buffered)."""
    held = _summary("gemma3/text6", "trimmable").to_dict()["sliding_window_caches"]["kv_bytes_held"]
    assert held and all({"untrimmed", "trimmed", "per_position"} <= set(h) and h["untrimmed"] == h["full"] > h["trimmed"]
                        for h in held)
    bounded = _summary("gemma3/text6", "bounded").to_dict()["sliding_window_caches"]["kv_bytes_held"]
    assert all("bounded" in h and "trimmed" not in h for h in bounded)


def _caches_at_window(fixture: str, window: int):
    """The fixture's planned sliding caches, as if their window were ``window`` (the payoff reads only the plan)."""
    caches = _summary(fixture, "trimmable").sliding_window_caches
    bounded = {vid: dataclasses.replace(b, window=window, keep=window - 1) for vid, b in caches.bounded.items()}
    return dataclasses.replace(caches, bounded=bounded)


def test_decode_rows_are_those_of_the_models_window_where_one_was_measured():
    """A window of 4,096 (Gemma 2, Mistral, Cohere2, EXAONE 4): the rows measured at 4,096, faster from 16k, not
    Gemma 3's row at 2,048 positions, where a cache of window 4,096 holds no less than the unmodified one."""
    at_4096 = payoff(_caches_at_window("gemma3/text6", 4096), SlidingWindow.TRIMMABLE)
    assert at_4096.window == 4096 and {m.window for m in at_4096.measured} == {4096}
    assert "Gemma 2 2B" in {m.widths for m in at_4096.measured} and at_4096.decode_from == 16384
    text = "\n".join(payoff_lines(at_4096.to_dict(), "gemma2"))
    assert "faster than native from 16,384 positions" in text and "with windows of 4,096" in text
    # a window no row was measured at: the rows of other windows past it, and no window said
    at_2048 = payoff(_caches_at_window("gemma3/text6", 2048), SlidingWindow.TRIMMABLE)
    assert at_2048.window is None and at_2048.measured and all(m.context > 2048 for m in at_2048.measured)
    assert at_2048.decode_from == 4096 and "with windows of" not in "\n".join(payoff_lines(at_2048.to_dict(), "gemma3"))


def test_the_advice_against_bounding_keeps_its_rows_at_any_window():
    """Leaving the fused kernel is measured slower at Gemma 3's window; a model of window 4,096 is told so with
    those rows, not with an empty list."""
    bounded = payoff(_caches_at_window("gemma3/text6", 4096), SlidingWindow.BOUNDED)
    assert bounded.advice is Advice.PREFER_TRIMMABLE and bounded.window is None
    assert bounded.measured and all(m.decode > 1 for m in bounded.measured)
    text = "\n".join(payoff_lines(bounded.to_dict(), "gemma3"))
    assert "(measured 1.26x at 2,048" in text and "(measured )" not in text
