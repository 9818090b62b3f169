"""Reproductions of the papers' experiments, one module per paper.

A module here is an experiment when it defines ``NAME`` (the name used by
``marketsched reproduce NAME``), ``TITLE`` (one line) and
``run(out_dir, quick, seeds, workers, executor)``, which writes ``report.md`` (and figures,
tables) into ``out_dir`` and returns its path, and ``write_report(results, out_dir)``, which
writes the report from the stored results alone. ``quick=True`` runs a reduced grid that
finishes in minutes; ``seeds=None`` means the experiment's own default. ``run`` declares its
work as tasks and runs them on :func:`marketsched.experiments.tasks.run_tasks` (or the grid
runner), which takes ``workers`` and ``executor`` and resumes from ``out_dir/tasks``. An optional ``QUICK_TIME`` (e.g. ``"~2 min"``) is the
measured CPU time of ``--quick`` (user + system, all its processes), shown by
``marketsched reproduce``; on two idle cores the wall time is about the same or less. Discovery is by module scan, so adding a paper needs no
edit to a shared file.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def available() -> dict[str, ModuleType]:
    """Map experiment name -> module, for every module in this package defining NAME and run."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in {"report", "runner"}:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        name = getattr(module, "NAME", None)
        if name and callable(getattr(module, "run", None)):
            if name in found:
                raise RuntimeError(f"two experiments are named {name!r}: {found[name].__name__} and {module.__name__}")
            found[name] = module
    return dict(sorted(found.items()))
