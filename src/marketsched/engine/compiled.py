"""Which engine runs: the compiled kernels or the pure-Python reference.

``MARKETSCHED_ENGINE``: ``auto`` (default: a policy's compiled kernel when its extension
imports), ``python`` (never: the reference path), ``compiled`` (required: a clear error when a
kernel's extension is missing).
"""

from __future__ import annotations

import os

MODES = ("auto", "python", "compiled")


def mode() -> str:
    """The engine mode from ``MARKETSCHED_ENGINE`` (``auto`` when unset or empty)."""
    value = os.environ.get("MARKETSCHED_ENGINE", "").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"MARKETSCHED_ENGINE must be one of {', '.join(MODES)}, got {value!r}")
    return value
