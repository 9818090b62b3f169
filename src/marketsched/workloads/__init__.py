"""Workloads: SWF traces, the trace registry, transforms, value models, a synthetic generator.

Public API (see ``docs/workloads.md``)::

    from marketsched.workloads import load_trace, to_workload, split_parallel, scale_capacity
    log = load_trace("LPC-EGEE-2004-1.2-cln")          # folder, cache, or download
    w, report = to_workload(log)                        # clean, with a DropReport
    w = scale_capacity(split_parallel(w), 0.75)         # 105 serial nodes
"""

from .registry import (
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
from .swf import SWF_FIELDS, SwfFormatError, SwfLog, read_swf, write_swf
from .synthetic import synthetic_workload
from .transforms import DropReport, first_jobs, scale_capacity, split_parallel, time_window, to_workload
from .values import bimodal, per_job, uniform_int
from .workload import Workload

__all__ = [
    "TRACES", "ChecksumError", "TraceInfo", "TraceNotFoundError", "UnverifiedTraceWarning", "fetch",
    "load_trace", "resolve_trace", "trace_info",
    "SWF_FIELDS", "SwfFormatError", "SwfLog", "read_swf", "write_swf",
    "DropReport", "first_jobs", "scale_capacity", "split_parallel", "time_window", "to_workload",
    "synthetic_workload", "bimodal", "per_job", "uniform_int", "Workload",
]
