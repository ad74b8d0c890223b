"""Synthetic graphs, references and runners shared by tests, property strategies, tools and benchmarks.

Not part of the wheel (``pyproject.toml`` packages ``ovpasses`` only): it is imported from the checkout.
pytest puts the checkout's root on ``sys.path`` (``pythonpath`` in ``pyproject.toml``), the scripts of
``tools/`` and ``benchmarks/`` insert it themselves, and a worker process under another venv's interpreter
is started with ``cwd`` and ``PYTHONPATH`` at the root (:func:`testkit.matrix.worker_env`).
"""
