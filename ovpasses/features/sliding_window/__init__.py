"""Sliding windows: the attention layers that see only the last ``W`` positions (Gemma 3, Gemma 3n, Gemma 4,
gpt-oss, Mistral, Phi-3). Their masks are made readable by openvino_genai's paged path where a runtime needs
it (every mode); with ``sliding_window="bounded"`` a KV cache only such layers read keeps its last ``W - 1``
positions; with ``sliding_window="trimmable"`` it stays in the plugin's fused kernel and stays exact when the
program trims it.

* ``masks.py``: the sliding-window masks a pass or the paged converter can read (:class:`SlidingWindowMask`,
  :func:`find_sliding_window_masks`; the distance form, :class:`DistanceWindowMask`);
* ``caches.py``: which KV caches only sliding-window attention reads, their window, the reference cache, and
  why the others are refused (:func:`analyze_sliding_window_caches`, :class:`SlidingWindowCaches`: the data of
  its report section);
* ``plan.py``: per mask, what the pipeline does on a runtime (:class:`MaskAction`, :func:`mask_plan`) and the
  masks' windows as plain data for the paged path's warnings (:func:`mask_windows`);
* ``sliding_window_mask_slice.py``, ``sliding_window_cache_bounding.py``, ``sliding_window_cache_trimmable.py``:
  the passes, :class:`SlidingWindowMaskSliceInsertion`, :class:`SlidingWindowKVCacheBounding`,
  :class:`TrimmableSlidingWindowKVCache`;
* ``first_prompt.py``: ``first_prompt="blocked"``, a long first prompt fed whole in query blocks,
  :class:`BlockedFirstPrompt`;
* ``release_points.py``: with ``sliding_window="trimmable"``, a sync point of the CPU plugin after each SDPA so that
  what crossed earlier sync points is freed with its layer, :class:`SDPAReleasePoints`;
* ``mask_expand.py``: with ``sliding_window="trimmable"``, the masks' expand to ``[batch, 1, rows, keys]`` left to
  the SDPAs that read them, :class:`SDPAMaskExpandElimination`;
* ``trim.py``: the program-side helper of ``sliding_window="trimmable"``, :class:`SlidingWindowTrimmer`.

The KV-memory arithmetic its reports use stays shared (``ovpasses.analysis.kv_memory``). Its steps' wiring is
``plan.mask_slice_part``, ``plan.bounding_part``, ``plan.trimming_part``, ``plan.blocked_part`` and
``plan.release_part``, ``plan.mask_expand_part``; its report lines are the
application's (``ovpasses.app.render.text``). Guides: ``docs/guides/sliding-window-bounded.md``,
``docs/guides/sliding-window-trimmable.md``.

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
