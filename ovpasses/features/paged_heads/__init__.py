"""Paged heads (``paged_heads="pad"``): the CPU PagedAttention of some releases mixes up layers whose head
layouts differ; padding every KV cache to one layout mends it.

* ``heads.py``: the head layout of each SDPA (query heads, head sizes);
* ``analysis.py``: which caches a padding would touch, to what layout, or why the model is refused;
* ``plan.py``: the step's plan (:class:`PagedHeadsStep`: mode, action, cost, what was padded, its
  ``to_dict`` for the reports);
* ``paged_path.py``: what no rewrite mends on openvino_genai's paged path, as data (:class:`PagedWarning`,
  :func:`paged_warnings`);
* ``attention_head_padding.py``: the pass, :class:`AttentionHeadPadding`.

The sentences of its report section are the application's (``ovpasses.app.render.text.paged_heads_lines``,
``paged_warning_text``). Guide: ``docs/guides/paged-heads-pad.md``.

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
