"""Unsharing (``kv_sharing="unshare"``): each borrower of a shared KV cache gets a cache of its own, so that
the CPU plugin fuses every attention layer statefully, at the cost of the copies' state.

* ``plan.py``: which shared caches to unshare for which borrowers, why the others stay shared (one
  reason per cache), what each copy costs per token (:class:`UnsharedCache`: the data of its report section);
* ``shared_kv_cache_unsharing.py``: the pass, :class:`SharedKVCacheUnsharing`.

It reads the KV-sharing analysis every feature shares (``ovpasses.analysis.kv_sharing``); its step's wiring is
``plan.unsharing_part``; its report lines are the application's (``ovpasses.app.render.text``).
Guide: ``docs/guides/kv-sharing-unshare.md``.

Its registration (``registration.py``: ``FEATURE``, one line in ``ovpasses/registry.py``) hands the registry its
steps and what the plan, the options and the summary need from it.
"""
