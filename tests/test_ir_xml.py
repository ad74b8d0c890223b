"""The tag walk over an IR's XML (ovpasses.ir_xml) sees what ElementTree's iterparse saw, and fails as it did."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ovpasses import ir_xml

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _iterparse_tags(path: Path) -> list[tuple[str, dict]]:
    return [(element.tag, dict(element.attrib)) for _event, element in ET.iterparse(path, events=("start",))]


def _walked_tags(path: Path) -> list[tuple[str, dict]]:
    tags: list[tuple[str, dict]] = []
    ir_xml.walk_start_tags(path, lambda tag, attributes: tags.append((tag, dict(attributes))))
    return tags


def _fixture_xmls(every: bool) -> list[Path]:
    """Every IR of the fixtures (80 files, 21 MB), or the first of each family and the largest."""
    paths = sorted(FIXTURES.glob("*/*/*.xml"))
    assert len(paths) >= 40, "the fixtures are where the tests expect them"
    if every:
        return paths
    first = {}
    for path in paths:
        first.setdefault(path.parent.parent.name, path)
    return sorted({*first.values(), max(paths, key=lambda path: path.stat().st_size)})


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["each family", "every IR"])
def test_every_fixture_walks_to_the_same_tags_as_iterparse(every):
    """The default run walks an IR of each family and the largest (3.6 MB, 56 chunks); the slow tier every IR."""
    for path in _fixture_xmls(every):
        assert _walked_tags(path) == _iterparse_tags(path), path


def test_a_callback_ends_the_walk_early():
    seen: list[str] = []

    def first_two(tag: str, _attributes: dict) -> None:
        seen.append(tag)
        if len(seen) == 2:
            raise ir_xml.StopWalk

    ir_xml.walk_start_tags(FIXTURES / "gemma4" / "tiny8" / "openvino_model.xml", first_two)
    assert seen == ["net", "layers"]


@pytest.mark.parametrize("text", [b"", b"<net><layers><layer id='0'", b"not xml", b"<net></layers>"],
                         ids=["empty", "truncated", "not xml", "mismatched"])
def test_a_damaged_file_raises_what_iterparse_raised(tmp_path, text):
    path = tmp_path / "m.xml"
    path.write_bytes(text)
    with pytest.raises(ET.ParseError) as expected:
        _iterparse_tags(path)
    with pytest.raises(ET.ParseError) as walked:
        _walked_tags(path)
    assert (walked.value.code, walked.value.position) == (expected.value.code, expected.value.position)
