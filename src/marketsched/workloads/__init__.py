"""Workloads: SWF traces, the trace registry, transforms, value models, a synthetic generator.

Public API (see ``docs/workloads.md``)::

    from marketsched.workloads import load_trace, to_workload, split_parallel, scale_capacity
    log = load_trace("LPC-EGEE-2004-1.2-cln")          # folder, cache, or download
    w, report = to_workload(log)                        # clean, with a DropReport
    w = scale_capacity(split_parallel(w), 0.75)         # 105 serial nodes

Names are imported from their module on first use (PEP 562), so importing one light module of
the package (the registry, for ``marketsched traces``) does not import NumPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Public name -> the module of this package that defines it.
_WHERE = {
    **dict.fromkeys(["TRACES", "ChecksumError", "TraceInfo", "TraceNotFoundError", "UnverifiedTraceWarning", "fetch",
                     "load_trace", "resolve_trace", "trace_info"], "registry"),
    **dict.fromkeys(["SWF_FIELDS", "SwfFormatError", "SwfLog", "read_swf", "write_swf"], "swf"),
    "synthetic_workload": "synthetic",
    **dict.fromkeys(["DropReport", "first_jobs", "scale_capacity", "split_parallel", "time_window", "to_workload"],
                    "transforms"),
    **dict.fromkeys(["bimodal", "bimodal_clipped", "per_job", "uniform_int"], "values"),
    "Workload": "workload",
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:  # a submodule (``marketsched.workloads.swf``), as after an eager import
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the submodule exists but needs something missing
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers
    from .registry import (  # noqa: F401
        TRACES,
        ChecksumError,
        TraceInfo,
        TraceNotFoundError,
        UnverifiedTraceWarning,
        fetch,
        load_trace,
        resolve_trace,
        trace_info,
    )
    from .swf import SWF_FIELDS, SwfFormatError, SwfLog, read_swf, write_swf  # noqa: F401
    from .synthetic import synthetic_workload  # noqa: F401
    from .transforms import (  # noqa: F401
        DropReport,
        first_jobs,
        scale_capacity,
        split_parallel,
        time_window,
        to_workload,
    )
    from .values import bimodal, bimodal_clipped, per_job, uniform_int  # noqa: F401
    from .workload import Workload  # noqa: F401
