"""A deliberately naive reference for the static-priority mechanisms (tests only).

At every event it re-sorts all active jobs (O(n^2 log n) overall) and computes every running
job's price directly from the paper's definitions, then integrates prices piecewise until the
next event. It shares no code with the engine, so agreement is evidence for both.
"""

import math

from hypothesis import strategies as st

BIDS = st.sampled_from([0.5, 1, 2, 3, 5, 8, 13])


@st.composite
def instances(draw):
    """Small random instances for :func:`simulate`: (submit, runtime, bid, nodes), integer times
    so that simultaneous events are frequent."""
    n = draw(st.integers(1, 14))
    nodes = draw(st.integers(1, 4))
    submit = sorted(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    bid = draw(st.lists(BIDS, min_size=n, max_size=n))
    return submit, runtime, bid, nodes


def assert_matches(rec, ref, preemptions: bool) -> None:
    """The engine's records ``rec`` equal the reference's ``(first_start, end, preemptions,
    payments)`` (payments to rounding; ``preemptions``: compare them too)."""
    import numpy as np

    fs, end, pre, pay = ref
    np.testing.assert_array_equal(rec.first_start, fs)
    np.testing.assert_array_equal(rec.end_time, end)
    if preemptions:
        np.testing.assert_array_equal(rec.preemptions, pre)
    np.testing.assert_allclose(rec.payment, pay, rtol=1e-9, atol=1e-9)


@st.composite
def parallel_instances(draw):
    """:func:`instances` with each job's processors (1 to the node count, mostly 1): (submit,
    runtime, bid, nodes, procs)."""
    submit, runtime, bid, nodes = draw(instances())
    procs = draw(st.lists(st.sampled_from([1, 1, 2, 3, 4]), min_size=len(submit), max_size=len(submit)))
    return submit, runtime, bid, nodes, [min(p, nodes) for p in procs]


def simulate(submit, runtime, bid, nodes, rule, pricing, changes=(), applied=None, procs=None):
    """``changes``: ``(t, j, new_bid)``: at time ``t`` job ``j``'s bid becomes ``new_bid`` if it was
    submitted before ``t`` and has not completed by ``t`` (the live market's rebid); the changes
    applied are appended to the list ``applied`` when one is given. ``procs``: processors per job
    (whole parallel jobs, in the strict list order: the running set is the longest prefix of the
    order that fits under HB; the non-preemptive rules start jobs in order while they fit), each
    paying its price per processor; None: serial jobs."""
    n = len(submit)
    procs = [1] * n if procs is None else list(procs)
    bid = list(map(float, bid))
    cost = [1.0] * n if rule in ("hb", "nphb") else [float(r) for r in runtime]
    key = [bid[i] / cost[i] if cost[i] > 0 else math.inf for i in range(n)]  # run time 0: first
    changes = sorted(changes, key=lambda c: c[0])
    applied = [] if applied is None else applied
    remaining = list(map(float, runtime))
    first_start = [math.nan] * n
    end = [math.nan] * n
    preempt = [0] * n
    pay = [0.0] * n
    running = set()
    done = set()
    t = 0.0

    def prio(j):
        return (-key[j], j)

    while len(done) < n:
        while changes and changes[0][0] <= t:
            _, j, b = changes.pop(0)
            if submit[j] < t and j not in done:
                bid[j], key[j] = float(b), (float(b) / cost[j] if cost[j] > 0 else math.inf)
                applied.append((t, j, float(b)))
        arrived = [j for j in range(n) if submit[j] <= t and j not in done]
        queued = sorted((j for j in arrived if j not in running), key=prio)
        if rule == "hb":
            want, room = set(), nodes
            for j in sorted(arrived, key=prio):  # the longest prefix that fits
                if procs[j] > room:
                    break
                want.add(j)
                room -= procs[j]
            for j in list(running):
                if j not in want:
                    running.discard(j)
                    preempt[j] += 1
            for j in want:
                if j not in running:
                    running.add(j)
                    if math.isnan(first_start[j]):
                        first_start[j] = t
        else:
            while queued and sum(procs[r] for r in running) + procs[queued[0]] <= nodes:
                j = queued.pop(0)
                running.add(j)
                first_start[j] = t
        queued = sorted((j for j in arrived if j not in running), key=prio)
        # prices, straight from the definitions (per processor)
        price = {}
        for j in running:
            if pricing == "first":
                price[j] = bid[j] if sum(procs[r] for r in arrived) >= nodes else 1.0
            elif not queued:
                price[j] = 1.0
            elif pricing == "kth-uncapped" and rule != "nphb":  # the paper's WSPT formula, no cap at the bid
                k = key[queued[0]]
                price[j] = cost[j] * k if cost[j] > 0 and k != math.inf else 0.0
            else:  # the smallest bid that keeps j ahead of the best queued job; 0 if any bid does
                price[j] = min(bid[j], cost[j] * key[queued[0]]) if cost[j] > 0 else 0.0
            price[j] *= procs[j]
        future = [submit[j] for j in range(n) if submit[j] > t] + [c[0] for c in changes if c[0] > t]
        t_next = min([t + remaining[j] for j in running] + future)
        dt = t_next - t
        for j in running:
            pay[j] += price[j] * dt
            remaining[j] -= dt
        t = t_next
        for j in list(running):
            if remaining[j] <= 1e-9:
                running.discard(j)
                done.add(j)
                end[j] = t
    return first_start, end, preempt, pay


def simulate_exact(submit, runtime, bid, nodes, rule, pricing, estimate=None):
    """The payments of the engine's schedule in exact arithmetic (tests only): returns
    ``(end, pay)`` with ``pay`` a list of :class:`fractions.Fraction`.

    The schedule is the engine's own arithmetic, re-done naively (every active job re-sorted at
    every event): keys are the float ratios ``bid / cost`` (the allocation's numbers), a job
    started at ``t`` ends at the float ``t + remaining`` and a preempted one keeps the float
    ``finish - t``, as the engine computes them. Only the payments are exact: each running job's
    price, from the paper's definitions with the float keys read as exact rationals, times the
    exact length of every interval between two events.
    """
    from fractions import Fraction

    n = len(submit)
    submit = [float(x) for x in submit]
    bid = [float(b) for b in bid]
    if rule in ("hb", "nphb"):
        cost = [1.0] * n
    elif rule == "wspt" or estimate is None:
        cost = [float(r) for r in runtime]
    else:
        cost = [float(r) if math.isnan(e) else float(e) for e, r in zip(estimate, runtime)]
    key = [bid[i] / cost[i] if cost[i] > 0 else math.inf for i in range(n)]
    remaining = [float(r) for r in runtime]
    finish = [math.inf] * n
    end = [math.nan] * n
    pay = [Fraction(0)] * n
    running: set[int] = set()
    done: set[int] = set()
    t = 0.0
    last = 0.0

    def prio(j):
        return (-key[j], j)

    price: dict[int, Fraction] = {}
    while len(done) < n:
        future = [submit[j] for j in range(n) if submit[j] > t] if t > 0 or done or running else list(submit)
        t_next = min([finish[j] for j in running] + future)
        for j in running:  # the prices since the last event, exact
            pay[j] += price[j] * (Fraction(t_next) - Fraction(last))
        t = last = t_next
        for j in sorted(running):
            if finish[j] <= t:
                running.discard(j)
                done.add(j)
                end[j] = t
                finish[j] = math.inf
                remaining[j] = 0.0
        arrived = [j for j in range(n) if submit[j] <= t and j not in done]
        if rule == "hb":
            want = set(sorted(arrived, key=prio)[:nodes])
            for j in sorted(running - want):
                running.discard(j)
                remaining[j] = finish[j] - t
                finish[j] = math.inf
            for j in want - running:
                running.add(j)
                finish[j] = t + remaining[j]
        else:
            queued = sorted((j for j in arrived if j not in running), key=prio)
            while len(running) < nodes and queued:
                j = queued.pop(0)
                running.add(j)
                finish[j] = t + remaining[j]
        queued = sorted((j for j in arrived if j not in running), key=prio)
        price = {}
        for j in running:
            if pricing == "first":
                price[j] = Fraction(bid[j]) if len(arrived) >= nodes else Fraction(1)
            elif not queued:
                price[j] = Fraction(1)
            elif cost[j] == 0:
                price[j] = Fraction(0)
            elif pricing == "kth-uncapped" and rule != "nphb":  # the paper's WSPT formula, no cap at the bid
                price[j] = Fraction(0) if key[queued[0]] == math.inf else Fraction(cost[j]) * Fraction(key[queued[0]])
            elif key[queued[0]] == math.inf:
                price[j] = Fraction(bid[j])
            else:
                price[j] = min(Fraction(bid[j]), Fraction(cost[j]) * Fraction(key[queued[0]]))
    return end, pay
