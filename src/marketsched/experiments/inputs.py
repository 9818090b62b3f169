"""Inputs checked before an experiment starts: the archive traces its tasks read.

A reproduction or grid whose traces are missing would start every task, and each would fail
on the same missing file. :func:`check_traces` runs first instead (:func:`run_tasks` and
:func:`run_grid` call it before any task starts). Steps:

1. collect the known trace names among the tasks' arguments (:func:`traces_in`: text that is
   a name of the trace registry, found in tuples, lists, dicts and dataclasses);
2. resolve each as every command does (:func:`marketsched.workloads.registry.resolve_trace`:
   the ``MARKETSCHED_TRACES`` folder, the cache, then a download checked against its sha256);
3. after the first download that fails, try no more (offline, each would wait for the same
   network): the others that are neither on disk nor cached are named as not tried;
4. if any is missing, raise :class:`MissingInputs`: one message naming every missing trace,
   why, and how to get it; no task has started.

A grid (:func:`check_cells`) also has each cell's mechanism and parameters checked against the
registry first, and the same message names every one that cannot run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from marketsched.experiments.tasks import TasksFailed


class MissingInputs(TasksFailed):
    """An experiment refused before any task started: inputs it reads are missing (the message
    names each and how to get it)."""


def traces_in(values: Iterable) -> list[str]:
    """The known trace names among ``values`` and what they hold (first seen first)."""
    from marketsched.workloads.registry import trace_info

    found: dict[str, None] = {}

    def visit(v, depth: int) -> None:
        if depth > 6:
            return
        if isinstance(v, str):
            try:
                found.setdefault(trace_info(v).name, None)
            except KeyError:
                pass
        elif isinstance(v, dict):
            for x in v.values():
                visit(x, depth + 1)
        elif isinstance(v, (tuple, list, set, frozenset)):
            for x in v:
                visit(x, depth + 1)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                visit(getattr(v, f.name), depth + 1)

    for v in values:
        visit(v, 0)
    return list(found)


def check_traces(names: Iterable[str]) -> None:
    """Make sure every trace of ``names`` is on disk (downloading what is not, as the commands
    do); :class:`MissingInputs` naming every one that is not (the module docstring's steps)."""
    _refuse([], _trace_problems(names))


def check_cells(cells) -> None:
    """For a grid (:class:`marketsched.experiments.runner.Cell`): every cell's mechanism is
    registered and takes the cell's parameters, and every trace is here; else one
    :class:`MissingInputs` naming each problem (a mechanism once, with the first bad cell's
    parameters)."""
    from marketsched.mechanisms.registry import get

    cells = list(cells)
    bad: dict[str, str] = {}
    for c in cells:
        if c.mechanism in bad:
            continue
        try:
            get(c.mechanism).resolve(c.mechanism_params())
        except ValueError as exc:
            bad[c.mechanism] = " ".join(str(exc).split())
    _refuse(list(bad.items()), _trace_problems(traces_in(c.trace for c in cells)))


def _trace_problems(names: Iterable[str]) -> list[tuple[str, str]]:
    """``(trace, why)`` of each trace of ``names`` neither on disk nor downloadable."""
    from marketsched.workloads import registry

    missing: list[tuple[str, str]] = []
    offline: str | None = None
    for name in dict.fromkeys(names):
        info = registry.trace_info(name)
        if offline is not None and registry.where(name)[0] == "remote":
            missing.append((info.name, f"not downloaded: the download of {missing[0][0]} failed first"))
            continue
        try:
            registry.resolve_trace(name)
        except (registry.TraceNotFoundError, registry.ChecksumError) as exc:
            root: BaseException = exc
            while root.__cause__ is not None:  # the network's own words (urllib's reason), not the wrappers'
                root = root.__cause__
            why = str(getattr(root, "reason", root))
            missing.append((info.name, why if root is exc else f"download from {info.url} failed: {why}"))
            offline = offline or why
    return missing


def _refuse(mechanisms: list[tuple[str, str]], traces: list[tuple[str, str]]) -> None:
    """Raise :class:`MissingInputs` listing every problem, if there is any."""
    if not mechanisms and not traces:
        return
    from marketsched.workloads import registry

    parts = ["nothing started:"]
    if mechanisms:
        parts.append(f"{len(mechanisms)} mechanism(s) cannot run as asked (`marketsched mechanisms NAME` lists "
                     "each one's parameters; a plugin's package must be installed):")
        parts += [f"  {name}: {why}" for name, why in mechanisms]
    if traces:
        folder, cache = registry.configured_traces_dir(), registry.configured_cache_dir()
        parts.append(f"{len(traces)} trace(s) this run reads are not here, not in the cache ({cache}) and could "
                     "not be downloaded:")
        parts += [f"  {name}: {why}" for name, why in traces]
        parts.append("Get them with `marketsched traces fetch NAME` where there is a network (then copy the cache "
                     f"folder here), or put the archive files (NAME.swf.gz) in a folder and set {registry.ENV_TRACES} "
                     "to it" + (f" (now {folder}, which does not hold them)" if folder is not None else "") + ".")
    raise MissingInputs("\n".join(parts))
