"""The KV-cache chain: the one pattern by which every pass and analysis here finds a cache.

    ReadValue(v) -> [Convert] -> [Gather(past, beam_idx, axis)] -> Concat(past, new)

The Concat is the cache as the layer reads it (``Concat(past, new)``, usually stored back by an Assign);
the Convert is there when the cache's element type differs from the model's, the Gather when the
exporter reorders beams. :func:`cache_chain_pattern` builds the pattern (its labels, to read a match
through ``get_pattern_value_map()``); :func:`find_cache_chains` returns, per variable, its first chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import openvino as ov
from openvino.passes import AnyInput, Matcher, Optional, WrapType


@dataclass(frozen=True)
class CacheChain:
    """The labels of one cache chain pattern."""

    concat: WrapType      # the root: Concat(past, new)
    read_value: WrapType
    new: AnyInput         # the Concat's second input: this step's K or V


def variable_id(node: ov.Node) -> str:
    return str(node.get_attributes()["variable_id"])


def cache_chain_pattern(variables: Iterable[str] | None = None,
                        concat_predicate: Callable[[ov.Output], bool] | None = None) -> CacheChain:
    """The chain of a cache of ``variables`` (default: any), whose Concat meets ``concat_predicate``."""
    wanted = None if variables is None else set(variables)
    read_value = (WrapType("opset6.ReadValue") if wanted is None else
                  WrapType("opset6.ReadValue", lambda out: variable_id(out.get_node()) in wanted))
    converted = Optional(["opset1.Convert"], read_value.output(0))
    past = Optional(["opset8.Gather"], [converted.output(0), AnyInput().output(0), AnyInput().output(0)])
    new = AnyInput()
    inputs = [past.output(0), new.output(0)]
    concat = (WrapType("opset1.Concat", inputs) if concat_predicate is None else
              WrapType("opset1.Concat", inputs, concat_predicate))
    return CacheChain(concat, read_value, new)


def find_cache_chains(model: ov.Model, variables: Iterable[str] | None = None,
                      name: str = "cache_chain",
                      ordered: list[ov.Node] | None = None) -> dict[str, tuple[ov.Node, ov.Node, ov.Output]]:
    """Per variable (of ``variables``, default any), its first cache chain in topological order:
    (Concat, ReadValue, new). ``ordered``: the model's ``get_ordered_ops()``, or its Concat nodes in that order,
    where the caller has them."""
    chain = cache_chain_pattern(variables)
    matcher = Matcher(chain.concat, name)
    chains: dict[str, tuple[ov.Node, ov.Node, ov.Output]] = {}
    for node in model.get_ordered_ops() if ordered is None else ordered:
        if node.get_type_name() == "Concat" and matcher.match(node.output(0)):
            pvm = matcher.get_pattern_value_map()
            read_value = pvm[chain.read_value].get_node()
            chains.setdefault(variable_id(read_value), (node, read_value, pvm[chain.new]))
    return chains
