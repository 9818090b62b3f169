"""`marketsched audit` and the live share market agree on a misreport (Stößer 2009, section
6.4.1: ZIC bidders bid uniformly on {1..v} of the value they report; utility
``v x CPU-seconds - payment`` with the true value): the job of value 20 among values 4, 9, 20
shading its value to 10 gains, and doubling it to 40 loses, in the audit and live alike.

Live: the truthful and the lying markets run on real processes with their books kept
(:class:`~marketsched.live.sharebooks.ShareBooks`); the recorded periods' bids, replayed through
the simulator's share market, give the CPU-seconds received and the payments, hence the focal
job's true utility and its change."""

from __future__ import annotations

import os

import numpy as np
import pytest

from live_helpers import wait_for
from marketsched.analysis.audit import Deviation, audit
from marketsched.behaviour.learning import make_bidder
from marketsched.live.share import ShareMarket, replay_through_simulator
from marketsched.live.sharebooks import ShareBooks
from marketsched.platform.ledger import DEPOSITS, MICRO, Store, user_account
from marketsched.scenario import Jobs
from marketsched.workloads.workload import Workload

VALUES = np.array([4.0, 9.0, 20.0])
ROUNDS = 6  # every job active for 6 seconds: the simulator's run is 6 periods of the live market
SEED = 1  # the scenario's seed: the share market's draws in the audit
FOCAL = 2
HANG = 120.0  # a guard against a hang, not a timing claim


def live_utility(tmp_path, rule, reported):
    """The focal job's true utility in a live run where the jobs report ``reported``."""
    store = Store(tmp_path)
    owners = ["a", "b", "c"]
    for o in owners:
        store.add_user(o, f"hash-{o}", False, 0.0)
        store.post(0.0, "deposit", DEPOSITS, user_account(o), 1000 * MICRO, memo="deposit")
    books = ShareBooks(store, "audit", owners, rule)
    m = ShareMarket(min(os.sched_getaffinity(0)), rule, make_bidder("zic", reported), reported, interval=0.05,
                    seed=SEED, books=books)
    try:
        m.start()
        assert wait_for(lambda: len(m.history) >= ROUNDS, timeout=HANG)
    finally:
        m.stop()
    books.check()
    periods = books.periods()[:ROUNDS]
    bids = np.array([p["bids"] for p in periods], dtype=np.float64) / MICRO
    received, paid = replay_through_simulator(rule, bids)
    booked = np.sum([p["payments"] for p in periods], axis=0)
    np.testing.assert_array_equal(np.rint(paid * MICRO), booked)  # the ledger's payments are the simulator's
    store.close()
    return VALUES[FOCAL] * received[FOCAL] - paid[FOCAL]


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_a_shaded_value_pays_live_as_in_the_audit(tmp_path, rule):
    w = Workload.from_columns(submit_time=np.zeros(3), runtime=np.full(3, float(ROUNDS)), capacity=1)
    jobs = Jobs.from_bids(w, VALUES, seed=SEED)
    table = audit(jobs, rule, None, [Deviation("value", 0.5), Deviation("value", 2.0)], job_ids=[int(w.job_id[FOCAL])])
    gains = dict(zip(table["amount"], table["gain"]))
    assert gains[0.5] > 0 > gains[2.0]  # the audit: shading pays, overbidding does not
    truthful = live_utility(tmp_path / "truthful", rule, VALUES)
    for factor, gain in gains.items():
        reported = VALUES.copy()
        reported[FOCAL] *= factor
        live_gain = live_utility(tmp_path / f"x{factor}", rule, reported) - truthful
        assert np.sign(live_gain) == np.sign(gain)
        assert live_gain == pytest.approx(gain, rel=1e-9)  # the same draws: the same bids as the audit's runs
