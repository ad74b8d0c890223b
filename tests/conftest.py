import openvino as ov
import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


@pytest.hookimpl(trylast=True)   # after pytest-xdist's own hook, which this one completes
def pytest_collection_modifyitems(config, items):
    _group_for_xdist(config, items)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _group_for_xdist(config, items) -> None:
    """``--dist loadgroup`` (tools/test.sh): what pytest-xdist 3.8 does in a worker, which pytest 9.2 undoes.

    xdist tells its scheduler a test's ``xdist_group`` by appending ``@NAME`` to the test's node id, through
    ``item._nodeid``; pytest 9.2 reads node ids from ``item._id``, so the suffix never shows and the tests
    of a group are spread over the workers as if unmarked (pytest-dev/pytest-xdist#1386, open). This sets
    the same suffix where xdist's did not take."""
    if not getattr(config.option, "loadgroup", False):   # set in xdist workers under --dist loadgroup
        return
    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(names)}"
        if names and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import coerce_node_id   # pytest >= 9.2, where item._id holds the node id

            item._id = coerce_node_id(item.nodeid + suffix)


@pytest.fixture(scope="session")
def core() -> ov.Core:
    return ov.Core()
