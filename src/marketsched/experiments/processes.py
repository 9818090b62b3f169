"""Process pools for the experiments, all with one explicit start method, ``"spawn"``.

Each worker is a fresh interpreter that imports what it runs. It inherits neither the parent's
threads and locks (forking a process that has threads, as the progress bars and the live
market do, can deadlock the child; Python 3.12 warns about it) nor state changed in the parent
at run time (a monkeypatch, an entry added to a registry by hand): workers see the package as
it imports and the environment as it is when the pool starts. It is the same on every
operating system (the default on macOS and Windows; Linux defaulted to ``"fork"`` before
Python 3.14). Costs: a worker imports the package once (about a second), and what is sent to
workers must be picklable (module-level functions), as for any process pool. A script that
starts a pool needs the ``if __name__ == "__main__":`` guard (workers import the main module).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

START_METHOD = "spawn"


def process_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` of ``workers`` processes (default: one per CPU) started with
    :data:`START_METHOD`."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(START_METHOD))
