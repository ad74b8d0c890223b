"""Old runtimes (``runtime=``): an IR written by a newer OpenVINO is made readable by an older one where that is
exact, or refused with the reason.

* ``analysis.py``: which operations (and opsets) the target runtime cannot read, bodies of Loop,
  TensorIterator and If included; the layer versions of an IR file read from its XML;
* ``plan.py``: the lowering passes (:data:`LOWERING_PASSES`), which nodes each gets, what became of each
  unreadable operation (:class:`OpVersionAction`, :func:`outcomes`: the data of its report section) and
  :func:`lower_op_versions`, the lowering run alone;
* ``erfinv_constant_folding.py``, ``convert_one_hot16_to_one_hot1.py``: the passes.

Which release reads which opset is a fact of the one runtime table, ``ovpasses.plan.runtimes``, which this
feature reads and never extends; the decision values (``Lowered``) are ``ovpasses.plan.decisions``'. Its steps'
part of the plan of a run is ``plan.lowering_part``. Guide: ``docs/guides/default-rewrite.md``; facts and their
measurements: ``docs/runtimes.md``.

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
