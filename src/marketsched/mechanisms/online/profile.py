"""Availability profile: free nodes of a cluster as a step function of time.

Source: Mutz (2008), section 6.1.3, the "SegmentedFunction" data structure: a
sorted list of segments covering [origin, inf) giving the number of occupied nodes, with
"insert a segment" and "find the soonest window where n nodes are available for t seconds".
The thesis uses a linked list with linear scans; here the segments are two NumPy arrays
(breakpoint times, occupied nodes) and the window search is one vectorised pass, so a
search costs a handful of array operations instead of a Python loop over segments.

Steps of ``earliest_window(nodes, duration, after, deadline)``:

1. mark each segment ``ok`` when ``capacity - used >= nodes``;
2. for every segment, find the start of the next segment that is not ``ok``
   (``searchsorted`` over the indices of the bad segments): that is where a run of
   ``ok`` segments ends;
3. a window can start at ``max(segment start, after)`` in any ``ok`` segment whose run
   lasts at least ``duration`` from there; the earliest such start is the answer (starts
   are increasing, so it is the first hit);
4. with a deadline, the window must also end by it (``start + duration <= deadline``),
   otherwise there is no window (``None``).

Like the thesis's structure it does not support removal (an EES plan never shrinks).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from operator import itemgetter, le, neg

import numpy as np

_time_of = itemgetter(0)  # sort key of the +n/-n events


class _Checks:
    """The request checks both profiles share (``capacity``, ``origin`` set by them)."""

    capacity: int
    origin: float

    def _set_machine(self, capacity, origin) -> None:
        """Check and set ``capacity`` (a positive integer) and ``origin`` (finite)."""
        if not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"AvailabilityProfile: capacity must be a positive integer, got {capacity!r}")
        if not math.isfinite(origin):
            raise ValueError(f"AvailabilityProfile: origin must be finite, got {origin!r}")
        self.capacity = int(capacity)
        self.origin = float(origin)

    def _check_request(self, where: str, nodes, duration) -> None:
        if not isinstance(nodes, (int, np.integer)) or nodes <= 0:
            raise ValueError(f"{where}: nodes must be a positive integer, got {nodes!r}")
        if nodes > self.capacity:
            raise ValueError(f"{where}: {nodes} nodes requested on a {self.capacity}-node machine")
        if not (math.isfinite(duration) and duration > 0):
            raise ValueError(f"{where}: duration must be positive and finite, got {duration!r}")

    def _reservation_end(self, start: float, duration: float, nodes: int) -> float:
        """The end of a reservation, after checking it (:meth:`reserve`)."""
        self._check_request("reserve", nodes, duration)
        if not (math.isfinite(start) and start >= self.origin):
            raise ValueError(f"reserve: start {start!r} is not a finite time at or after origin {self.origin}")
        return start + duration


class AvailabilityProfile(_Checks):
    """Occupied nodes over [origin, inf) on a machine of ``capacity`` nodes.

    ``times[k]`` is the start of segment k (``times[0] == origin``), ``used[k]`` the nodes
    occupied on ``[times[k], times[k+1])``; the last segment extends to infinity.
    """

    def __init__(self, capacity: int, origin: float = 0.0):
        self._set_machine(capacity, origin)
        self.times = np.array([self.origin])
        self.used = np.array([0], dtype=np.int64)

    def copy(self) -> AvailabilityProfile:
        other = AvailabilityProfile(self.capacity, self.origin)
        other.times = self.times.copy()
        other.used = self.used.copy()
        return other

    def __len__(self) -> int:
        return len(self.times)

    def free_at(self, t: float) -> int:
        """Free nodes at time t (t >= origin)."""
        if not (t >= self.origin):
            raise ValueError(f"free_at: time {t!r} is before the profile origin {self.origin}")
        k = int(np.searchsorted(self.times, t, side="right")) - 1
        return self.capacity - int(self.used[k])

    def earliest_window(self, nodes: int, duration: float, after: float | None = None,
                        deadline: float | None = None) -> float | None:
        """Earliest start s >= after with ``nodes`` free on [s, s + duration); None if it
        cannot end by ``deadline``."""
        self._check_request("earliest_window", nodes, duration)
        after = self.origin if after is None else max(float(after), self.origin)
        times, used = self.times, self.used
        ok = (self.capacity - used) >= nodes
        ends = np.append(times[1:], np.inf)
        bad = np.flatnonzero(~ok)
        run_end = np.full(len(times), np.inf)  # where the run of ok segments from k ends
        if len(bad):
            nxt = np.searchsorted(bad, np.arange(len(times)))  # next bad segment index >= k
            inside = nxt < len(bad)
            run_end[inside] = times[bad[nxt[inside]]]
        start = np.maximum(times, after)
        fits = ok & (ends > after) & (run_end - start >= duration)
        hit = np.flatnonzero(fits)
        if len(hit) == 0:  # cannot happen: the last segment is free after every finite job
            return None
        s = float(start[hit[0]])
        if deadline is not None and s + duration > deadline:
            return None
        return s

    def reserve(self, start: float, duration: float, nodes: int) -> None:
        """Occupy ``nodes`` on [start, start + duration); raises if capacity would be exceeded."""
        end = self._reservation_end(start, duration, nodes)
        for t in (start, end):  # split segments at the two new breakpoints
            k = int(np.searchsorted(self.times, t, side="right")) - 1
            if self.times[k] != t:
                self.times = np.insert(self.times, k + 1, t)
                self.used = np.insert(self.used, k + 1, self.used[k])
        a = int(np.searchsorted(self.times, start))
        b = int(np.searchsorted(self.times, end))
        if np.any(self.used[a:b] + nodes > self.capacity):
            raise ValueError(f"reserve: {nodes} nodes on [{start}, {end}) exceed capacity {self.capacity}")
        self.used[a:b] += nodes

    def place(self, nodes: int, duration: float, after: float | None = None,
              deadline: float | None = None) -> float | None:
        """Reserve the earliest window (greedy insertion); return its start or None."""
        s = self.earliest_window(nodes, duration, after, deadline)
        if s is not None:
            self.reserve(s, duration, nodes)
        return s


class ListProfile(_Checks):
    """An availability profile held as two Python lists (``times``, ``used``): what a relaxed-EES
    decision does with one (build it from intervals, :meth:`reserve`, hand it to
    :func:`greedy_starts`) without an array operation per call; the rules, checks and results
    are :class:`AvailabilityProfile`'s (the reference; tests hold both equal).
    """

    def __init__(self, capacity: int, origin: float = 0.0):
        self._set_machine(capacity, origin)  # the same checks
        self.times: list[float] = [self.origin]
        self.used: list[int] = [0]


    @classmethod
    def of_intervals(cls, capacity: int, origin: float, starts, ends, nodes, kernel=None) -> ListProfile:
        """The profile at ``origin`` holding ``[start, end)`` on ``nodes`` each (as
        :func:`marketsched.mechanisms.online.ees_driver.profile_of`): the +n/-n events in time
        order, the running sum after the last event of each time. ``kernel``: the module of
        :func:`profile_kernel` (the lists built in C), or None."""
        prof = cls(capacity, origin)
        starts, ends, nodes = list(starts), list(ends), [int(n) for n in nodes]
        if (starts and min(starts) < origin) or any(map(le, ends, starts)):
            raise ValueError("profile_of: every interval must start at or after the origin and have positive length")
        times: list[float] = []
        used: list[int] = []
        if kernel is not None:
            times, used = kernel.profile_of(float(origin), starts, ends, nodes)
        else:
            events = sorted([(float(origin), 0), *zip(starts, nodes), *zip(ends, map(neg, nodes))], key=_time_of)
            total = 0
            for t, delta in events:
                total += delta
                if times and times[-1] == t:
                    used[-1] = total
                else:
                    times.append(t)
                    used.append(total)
        if max(used) > capacity:
            raise ValueError(f"profile_of: the intervals use {max(used)} nodes of {capacity}")
        prof.times, prof.used = times, used
        return prof

    def reserve(self, start: float, duration: float, nodes: int) -> None:
        """:meth:`AvailabilityProfile.reserve` on the lists."""
        end = self._reservation_end(start, duration, nodes)
        times, used = self.times, self.used
        for t in (start, end):  # split segments at the two new breakpoints
            k = bisect_right(times, t) - 1
            if times[k] != t:
                times.insert(k + 1, t)
                used.insert(k + 1, used[k])
        a, b = bisect_left(times, start), bisect_left(times, end)
        if any(used[m] + nodes > self.capacity for m in range(a, b)):
            raise ValueError(f"reserve: {nodes} nodes on [{start}, {end}) exceed capacity {self.capacity}")
        for m in range(a, b):
            used[m] += nodes


def greedy_starts(runtime, nodes, capacity: int, profile: AvailabilityProfile | ListProfile | None = None,
                  origin: float = 0.0, fast: bool = True) -> np.ndarray:
    """Insert jobs in the given order, each at its earliest window; return their starts.

    This is the "best-effort schedule" of Mutz (2008), section 6.1.3. ``profile`` (copied, not
    modified; an :class:`AvailabilityProfile` or a :class:`ListProfile`) holds capacity already
    taken, e.g. by running jobs. ``fast`` (default) runs
    :func:`greedy_starts_lists`; ``fast=False`` places each job with
    :meth:`AvailabilityProfile.place`, the reference (the tests hold both equal).
    """
    runtime = np.asarray(runtime, dtype=float)
    nodes = np.asarray(nodes)
    if runtime.shape != nodes.shape or runtime.ndim != 1:
        raise ValueError(f"greedy_starts: runtime {runtime.shape} and nodes {nodes.shape} must be equal 1-D shapes")
    prof = AvailabilityProfile(capacity, origin) if profile is None else profile
    if len(runtime):
        prof._check_request("greedy_starts", int(nodes.max()), float(runtime.max()))
        prof._check_request("greedy_starts", int(nodes.min()), float(runtime.min()))
    if fast:
        times, used = profile_lists(prof)
        return np.array(greedy_starts_lists(times, used, prof.capacity, runtime.tolist(), nodes.tolist()),
                        dtype=np.float64).reshape(len(runtime))
    if isinstance(prof, ListProfile):
        raise ValueError("greedy_starts: the reference (fast=False) runs on an AvailabilityProfile")
    prof = prof.copy()
    out = np.empty(len(runtime))
    for k in range(len(runtime)):
        out[k] = prof.place(int(nodes[k]), float(runtime[k]))
    return out


def profile_lists(prof: AvailabilityProfile | ListProfile) -> tuple[list, list]:
    """New lists of a profile's breakpoints and counts (for :func:`greedy_starts_lists`, which modifies them)."""
    if isinstance(prof, ListProfile):
        return list(prof.times), list(prof.used)
    return prof.times.tolist(), prof.used.tolist()


def profile_kernel():
    """The compiled twins of :func:`greedy_starts_lists` (``greedy_starts``: it reads the lists
    without modifying them) and of :meth:`ListProfile.of_intervals`'s lists (``profile_of``), the
    same operations in C, bit for bit; None when ``MARKETSCHED_ENGINE`` chooses Python or the
    module is not built (:func:`marketsched.engine.compiled.kernel`)."""
    from marketsched.engine.compiled import kernel

    return kernel("marketsched.mechanisms.online._profile_kernel")


def greedy_starts_lists(times: list, used: list, capacity: int, runtime: list, nodes: list) -> list:
    """The starts of :func:`greedy_starts` on a profile held as two Python lists (modified).

    The same rules as :meth:`AvailabilityProfile.earliest_window` and
    :meth:`~AvailabilityProfile.reserve` (no ``after``, no deadline), without an array
    operation per job (each costs microseconds of overhead on profiles of tens of segments):

    1. walk the runs of segments with ``used <= capacity - nodes``; the first run whose length
       from its first segment, ``times[end of run] - times[first]``, is at least the run time
       starts the job at ``times[first]`` (later segments of a run give shorter windows, so
       they never fit when the first does not; the last segment is free forever);
    2. split the segment holding the job's end at the end (``bisect``, one ``list.insert``
       each into the breakpoints and the counts: a move of pointers, no new array);
    3. add the job's nodes to every segment from its start up to its end.
    """
    out = []
    for r, n in zip(runtime, nodes):
        limit = capacity - n
        L = len(times)
        k = 0
        while True:
            while used[k] > limit:  # the last segment is free once every finite job ended
                k += 1
            b = k + 1
            while b < L and used[b] <= limit:
                b += 1
            if b == L or times[b] - times[k] >= r:
                break
            k = b
        s = times[k]
        end = s + r
        e = bisect_right(times, end) - 1
        if times[e] != end:
            times.insert(e + 1, end)
            used.insert(e + 1, used[e])
            e += 1
        for m in range(k, e):
            used[m] += n
        out.append(s)
    return out
