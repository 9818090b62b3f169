"""Which engine runs a simulation: the pure-Python reference or a compiled kernel.

A compiled kernel is the engine loop of :class:`~marketsched.engine.simulator.Simulator` and one
policy's rule in C (an optional extension module built by ``pip install``). It gives the same
records as the Python path, bit for bit; the Python classes stay the reference. A policy offers
one through a method ``compiled_run(sim)`` that returns the run's
:class:`~marketsched.engine.records.Records`, or None when its configuration has no kernel.

``MARKETSCHED_ENGINE`` chooses:

* ``auto`` (default): a kernel when its extension module imports, else the Python path;
* ``python``: always the Python path;
* ``compiled``: a kernel whenever the policy has one, and an error when its extension module is
  missing (a build that silently fell back would otherwise go unnoticed).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

MODES = ("auto", "python", "compiled")


def mode() -> str:
    """The engine mode from ``MARKETSCHED_ENGINE`` (default ``auto``)."""
    value = os.environ.get("MARKETSCHED_ENGINE", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"MARKETSCHED_ENGINE={value!r}: choose one of {', '.join(MODES)}")
    return value


def kernel(name: str) -> ModuleType | None:
    """The compiled module ``name`` (a dotted module path, or a bare name for
    ``marketsched.engine.<name>``), or None when the Python path must run (mode ``python``, or
    mode ``auto`` and the module is not built); in mode ``compiled`` a missing module is a
    RuntimeError."""
    m = mode()
    if m == "python":
        return None
    module = name if "." in name else f"marketsched.engine.{name}"
    try:
        return importlib.import_module(module)
    except ImportError:
        if m == "compiled":
            raise RuntimeError(f"MARKETSCHED_ENGINE=compiled but the compiled kernel {module} is not built "
                               "(reinstall with a C compiler and Python headers: pip install -e .)") from None
        return None


def available(name: str) -> bool:
    """Whether the compiled module ``marketsched.engine.<name>`` imports (whatever the mode)."""
    try:
        importlib.import_module(f"marketsched.engine.{name}")
    except ImportError:
        return False
    return True
