"""SDPA recovery: an IR exported with eager attention (MatMul -> Softmax -> MatMul) gets back the
ScaledDotProductAttention nodes the rest of the pipeline (and the plugin's fusion) works on, where that is
exact.

* ``analysis.py``: the one pattern of the eager forms, the one predicate that refuses a match (its reason),
  and :func:`find_eager_attention`, every attention-like Softmax with whether it is recoverable and why not
  (``EagerAttention.to_dict``: the data of its report section);
* ``eager_attention_to_sdpa.py``: the pass, :class:`EagerAttentionToSDPA`.

Its part of the plan of a run is ``plan.recovery_part``; its report lines are the application's
(``ovpasses.app.render.text``). Guide: ``docs/guides/sdpa-recovery.md``.

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
