"""The forms ``ovpass bench`` measures and ``rewrite --for`` applies: what ``ovpass rewrite`` writes with a set of
flags, and which of them each client can run."""

from __future__ import annotations

CLIENTS = ("core", "optimum", "genai", "genai-paged")
# form -> the options ``ovpass rewrite`` takes for it (None: the export as it is) and its flags
FORMS: dict[str, tuple[dict | None, tuple[str, ...]]] = {
    "unmodified": (None, ()),
    "default": ({}, ()),
    "bounded": ({"sliding_window": "bounded"}, ("--sliding-window", "bounded")),
    "trimmable": ({"sliding_window": "trimmable"}, ("--sliding-window", "trimmable")),
    "trimmable+blocked": ({"sliding_window": "trimmable", "first_prompt": "blocked"},
                          ("--sliding-window", "trimmable", "--first-prompt", "blocked")),
    "unshare": ({"kv_sharing": "unshare"}, ("--kv-sharing", "unshare")),
}
CLIENT_FORMS = {
    "core": ("unmodified", "default", "bounded", "trimmable", "trimmable+blocked", "unshare"),
    "optimum": ("unmodified", "default", "bounded", "trimmable", "trimmable+blocked", "unshare"),
    "genai": ("unmodified", "default", "bounded", "trimmable+blocked", "unshare"),
    "genai-paged": ("unmodified", "default"),
}
TRIMMED = {"trimmable", "trimmable+blocked"}   # forms whose program runs the trimmer (core, optimum)
