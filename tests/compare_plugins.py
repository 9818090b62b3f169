"""Mechanisms that misbehave while running, for the tests of ``compare``'s robustness: each is
FCFS (Backfilling without backfill, on the Python path) that does something at its first step.
``register_misbehaving()`` registers them: ``broken`` raises, ``stopper`` sends SIGINT (Ctrl-C)
to its own process after noting which runs ``--out`` held then (in the file named by
``$COMPARE_SEEN``)."""

from __future__ import annotations

import os
import signal

from marketsched.mechanisms.online.backfilling import Backfilling
from marketsched.mechanisms.registry import Mechanism, register


class Broken(Backfilling):
    def step(self, t, arrived, completed):
        raise RuntimeError(f"the plugin's own bug at t={t:g}")


class Stopper(Backfilling):
    def __init__(self, out: str | None):
        super().__init__(backfill=False)
        self.out = out

    def step(self, t, arrived, completed):
        if self.out is not None:
            from marketsched.results import read

            with open(os.environ["COMPARE_SEEN"], "w") as f:
                f.write(",".join(sorted(read(self.out)[0]["run"].unique())))
        os.kill(os.getpid(), signal.SIGINT)
        super().step(t, arrived, completed)


def register_misbehaving(out: str | None = None) -> None:
    register(Mechanism("broken", "Raises at its first step", "queue", "a test", lambda jobs: Broken(backfill=False),
                       market=False), replace=True)
    register(Mechanism("stopper", "Ctrl-C at its first step", "queue", "a test", lambda jobs: Stopper(out),
                       market=False), replace=True)
