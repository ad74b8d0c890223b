"""Quantities as a person reads them (the one formatter of sizes, for the library's sentences and the
application's text alike; JSON keeps the numbers)."""

from __future__ import annotations


def size_text(size: int | float) -> str:
    """A byte count for a person: ``512 bytes``, ``1.5 KiB``, ``12.0 MiB``, ``2.25 GiB``, ``3.00 TiB``."""
    if size < 1024:
        return f"{size:g} bytes" if isinstance(size, float) else f"{size} bytes"
    units = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
    unit, scale = next((unit, scale) for unit, scale in units if size >= scale)
    value = size / scale
    if unit == "PiB" and value >= 1024:
        return f"{value:.3g} PiB"
    return f"{value:.2f} {unit}" if scale >= 2**30 else f"{value:.1f} {unit}"
