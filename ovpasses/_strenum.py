"""``StrEnum`` for every Python the package supports: ``enum.StrEnum`` is 3.11+, and ``pyproject.toml``
declares 3.10. A member is a ``str`` equal to its value, and ``str()``, ``format()`` and f-strings give
the value on 3.10 as on 3.11+ (where a plain ``(str, Enum)`` gives ``Class.MEMBER`` since 3.11)."""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return format(str.__str__(self), spec)
