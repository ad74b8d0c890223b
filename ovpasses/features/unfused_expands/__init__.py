"""Unfused expands: the GQA expand in front of every SDPA the CPU plugin does not fuse, elided (one KV head: the
SDPA broadcasts it) or broadcast once (several), in every mode.

* ``plan.py``: the step's plan (:func:`expand_part`: the SDPAs :func:`~ovpasses.analysis.stateful_fusion.predict_fusion`
  expects unfused, as the earlier rules left the model, that read K or V through an exported expand);
* ``unfused_sdpa_expands.py``: the pass, :class:`UnfusedSDPAExpandRewrite` (its functions on one expand are the
  bounding's too: :mod:`ovpasses.passes.gqa_expand`).

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
