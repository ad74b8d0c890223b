"""A home per feature: each subpackage holds one feature's analysis, its part of the plan, its passes and the
data of its report section. Features stand on the shared layers below them (``analysis``, ``plan``, the
shared passes) and never import each other (``tests/test_layout.py`` checks both)."""
