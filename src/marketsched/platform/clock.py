"""Clocks injected into the live engine (one rule, one implementation: the live engine runs the
simulator's policies).

The live engine never reads the time itself: it calls ``clock()``. Tests pass a
:class:`FakeClock` they move by hand, so a scripted sequence of arrivals and completions
produces exactly the times the :class:`~marketsched.engine.simulator.Simulator` would see; the
broker passes a :class:`WallClock`, which counts seconds of wall-clock time since the market's
epoch (stored in the market's database, so market time goes on across restarts); a market that
both books Unix times and measures elapsed seconds (the live share market) takes a
:class:`SteadyClock`.
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


class SteadyClock:
    """Unix time that never steps: the wall clock (``time.time``) read once, when the clock is
    made, plus the monotonic time (``time.monotonic``) elapsed since.

    One clock for a market that records when things happen (Unix times, in its books) and
    measures how long they took (CPU seconds over elapsed seconds): differences of its readings
    are true elapsed seconds even when the system clock is set meanwhile, and a reading stays
    within the clock's drift of the Unix time of the moment.
    """

    def __init__(self) -> None:
        self.origin, self.start = time.time(), time.monotonic()

    def __call__(self) -> float:
        return self.origin + (time.monotonic() - self.start)
