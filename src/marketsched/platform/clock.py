"""Clocks injected into the live engine (one rule, one implementation: the live engine runs the
simulator's policies).

The live engine never reads the time itself: it calls ``clock()``. Tests pass a
:class:`FakeClock` they move by hand, so a scripted sequence of arrivals and completions
produces exactly the times the :class:`~marketsched.engine.simulator.Simulator` would see; the
broker passes a :class:`WallClock`, which counts seconds of wall-clock time since the market's
epoch (stored in the market's database, so market time goes on across restarts).
"""

from __future__ import annotations

import time


class FakeClock:
    """A clock that only moves when told to (tests and replays)."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def set(self, t: float) -> None:
        if t < self.t:
            raise ValueError(f"a clock does not go back: now {self.t}, asked for {t}")
        self.t = float(t)

    def advance(self, dt: float) -> None:
        self.set(self.t + dt)


class WallClock:
    """Seconds of wall-clock time (``time.time``) since ``epoch`` (a Unix time).

    Wall-clock rather than monotonic time so that market time is continuous across a restart
    of the broker (the epoch lives in the database). The live engine never lets its own time go
    backwards (a step of the system clock backwards makes time stand still until it catches up).
    """

    def __init__(self, epoch: float | None = None):
        self.epoch = time.time() if epoch is None else float(epoch)

    def __call__(self) -> float:
        return time.time() - self.epoch
