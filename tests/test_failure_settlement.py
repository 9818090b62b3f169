"""A job whose machine failed is charged up to the failure time, which the live market learns
later (a Slurm node is declared down some 15 s after it died): the live engine's payment of a row
up to an earlier time (``LiveEngine.accrued_at``), checked against a plain reference on random
instances with ties: the same events replayed only up to that time, then the payment read there."""

import numpy as np
import pytest

from marketsched.mechanisms.online.priority import PriorityScheduler
from marketsched.platform.clock import FakeClock
from marketsched.platform.engine import LiveEngine


def engine(rule, pricing, slots):
    clock = FakeClock(0.0)
    mech = PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=pricing, name=rule)
    return LiveEngine(mech, slots, clock), clock


def play(rule, pricing, slots, events, until=None):
    """Run ``events`` (time, arrivals, completions by arrival index); with ``until``, only those
    before it, then move the clock to ``until``. Returns the engine."""
    eng, clock = engine(rule, pricing, slots)
    for t, arrivals, done in events:
        if until is not None and t > until:
            break
        clock.set(t)
        eng.batch(arrivals=arrivals, completed=[j for j in done if eng.running[j]])
    if until is not None:
        clock.set(until)
    return eng


@pytest.mark.parametrize("pricing", ["kth", "first"])
@pytest.mark.parametrize("rule", ["hb", "nphb", "wsept"])
@pytest.mark.parametrize("seed", range(15))
def test_the_payment_up_to_an_earlier_time_is_the_payment_read_at_that_time(rule, pricing, seed):
    rng = np.random.default_rng(seed)
    slots = int(rng.integers(1, 4))
    events, n, t = [], 0, 0.0
    for _ in range(int(rng.integers(3, 12))):
        t += float(rng.choice([0.5, 1.0, 2.5]))  # few values: events at equal spacing, ties in time
        k = int(rng.integers(0, 3))
        bids = rng.integers(1, 4, k).astype(float)  # few values: ties in bids
        cost = rng.integers(1, 3, k).astype(float) if rule == "wsept" else np.ones(k)
        arrivals = [(bids[i], bids[i] / cost[i], cost[i], 1) for i in range(k)]
        done = sorted(set(rng.integers(0, n, int(rng.integers(0, 2))).tolist())) if n else []
        events.append((t, arrivals, done))
        n += k
    end = t + 1.0
    full = play(rule, pricing, slots, events, until=end)
    for q in np.unique(np.concatenate([[e[0] for e in events], rng.uniform(0, end, 6)])):
        ref = play(rule, pricing, slots, events, until=float(q))
        for j in range(full.n_jobs):
            if full.running[j] and full.run_start[j] <= q and j < ref.n_jobs:  # ran without a stop since q
                assert full.accrued_at(j, float(q)) == pytest.approx(ref.accrued(j), abs=1e-9)
    # a time at or after now: the payment up to now; before the row started: from its start
    for j in range(full.n_jobs):
        if full.running[j]:
            assert full.accrued_at(j, end + 5) == full.accrued(j)
            assert full.accrued_at(j, -1.0) == pytest.approx(full.accrued_at(j, full.run_start[j]), abs=1e-12)


def test_a_failure_time_between_two_price_changes_splits_the_interval():
    eng, clock = engine("hb", "kth", 1)
    eng.batch(arrivals=[(5.0, 5.0, 1.0, 1)])  # runs alone: the reservation price 1
    clock.set(10.0)
    eng.batch(arrivals=[(2.0, 2.0, 1.0, 1)])  # queued behind it: k-th price 2 from now
    clock.set(20.0)
    assert eng.accrued(0) == pytest.approx(10 * 1 + 10 * 2)
    assert eng.accrued_at(0, 4.0) == pytest.approx(4.0)
    assert eng.accrued_at(0, 15.0) == pytest.approx(10 + 5 * 2)
