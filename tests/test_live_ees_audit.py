"""`marketsched audit` and the live EES market agree on a misreport (Mutz 2008, chapter 4;
utility ``v 1{completed} - d x waiting time - payment`` with the true types, eqs. 4.5-4.6).

Four jobs on one CPU, the scenario's EES types (``d = w``, ``v = w x (deadline - submit)``) with
the declared prior of ``prior_points=2`` quantile points of the reported types. The audit finds
that the job of weight 0.8 (value 40, run time 5 s) gains by shading its bid to half
(``value 0.5``: it reports ``v/2`` and ``d/2``) and loses by doubling it (``value 2``). Live:
the truthful and the lying arrivals are submitted to an :class:`~marketsched.live.ees.EESMarket`
with an injected clock, the same prior, draws and seed as the audit's runs, every process
exiting at its declared run time; the focal job's true utility is read from the market (its
state, its start, and its owner's balance on the ledger). The live gain has the audit's sign
and its value up to the ledger's rounding of each payment to the micro-unit.

The relaxed EES's case (Mutz 2008, chapter 6, utility eqs. 6.5-6.6): the same four jobs on two
CPUs asking 1, 2, 1 and 2 CPUs; the audit finds that the last job (weight 0.3, value 18, 2 CPUs)
gains by doubling its bid and loses by shading it, and the live relaxed-EES market (jobs packed
by CPU count, planned starts) agrees in sign and value."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from marketsched.analysis.audit import Deviation, audit
from marketsched.live.ees import EESConfig, EESMarket
from marketsched.mechanisms.builtin import ees_types
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, Store
from marketsched.scenario import Jobs
from marketsched.workloads.workload import Workload
from test_live_ees import Scripted

SUBMIT = np.array([0.0, 1.0, 2.0, 3.0])
RUNTIME = np.array([10.0, 20.0, 5.0, 4.0])  # the processes' run times
DECLARED = RUNTIME + 1.0  # the reported (maximal) run times: each process exits before its stop
WEIGHT = np.array([0.5, 0.1, 0.8, 0.3])  # the bids: delay costs per second
PATIENCE = np.array([100.0, 50.0, 50.0, 60.0])  # deadline - submit: values 50, 5, 40, 18
PARAMS = {"n_draws": 50, "estimator": "shared", "prior_points": 2}
SEED = 3
FOCAL = 2
OWNERS = ("a", "b", "c", "d")
DEPOSIT = 1000.0


RELAXED_PROCS = np.array([1, 2, 1, 2])
RELAXED_FOCAL = 3


def scenario(procs=None) -> Jobs:
    cap = 1 if procs is None else 2
    w = Workload.from_columns(submit_time=SUBMIT, runtime=RUNTIME, runtime_estimate=DECLARED, procs=procs, capacity=cap)
    return replace(Jobs.from_bids(w, WEIGHT, seed=SEED), deadline=SUBMIT + PATIENCE)


def run_until(m, clock, t, ids) -> None:
    """The market's loop up to ``t`` (excluded), each started job's process exiting after its
    ``RUNTIME`` (recomputed at every step: a job may start after the last submission)."""
    while True:
        rows = [(k, m.job_row[j]) for k, j in enumerate(ids)]
        ends = {ids[k]: m.engine.first_start[r] + RUNTIME[k] for k, r in rows if m.state.get(ids[k]) == "running"}
        nxt = min([m.next_event(), *ends.values()])
        clock.set(min(nxt, t))
        m.executor.ended = [(j, 0) for j, e in ends.items() if e <= clock()]
        if nxt >= t:
            return
        m.tick()


def live_utility(tmp_path, factor: float, procs=None, focal: int = FOCAL) -> float:
    """The focal job's true utility in a live run where it reports its bid x ``factor``
    (``procs`` given: the relaxed EES on two CPUs, each job asking its CPUs)."""
    jobs = scenario(procs)
    bid = WEIGHT.copy()
    bid[focal] *= factor
    v, d, prior = ees_types(replace(jobs, bid=bid), PARAMS["prior_points"])

    @dataclass(frozen=True)
    class AuditPrior(EESConfig):
        """The market's config with the audit's declared prior (quantile points, not uniform)."""

        @property
        def prior(self):
            return prior

    config = AuditPrior(mechanism="ees" if procs is None else "relaxed-ees", cpus=1 if procs is None else 2, value=(0.0, 1000.0), delay_cost=(0.0, 10.0), n_draws=PARAMS["n_draws"],
                        estimator=PARAMS["estimator"], seed=SEED).check()
    clock = FakeClock(0.0)
    m = EESMarket(Store(tmp_path), config, clock, Scripted())
    for u in OWNERS:
        m.add_user(u, DEPOSIT)
    ids: list[int] = []
    for k in range(len(SUBMIT)):
        run_until(m, clock, SUBMIT[k], ids)
        cpus = None if procs is None else int(procs[k])
        ids.append(m.submit(OWNERS[k], float(v[k]), float(d[k]), float(DECLARED[k]), "true", cpus)["id"])
    run_until(m, clock, 1e7, ids)
    assert all(m.state[j] in ("completed", "discarded") for j in ids)  # no process outran its declared time
    row = m.job_row[ids[focal]]
    start, end = m.engine.first_start[row], m.engine.end_time[row]
    waited = (end if np.isnan(start) else start) - SUBMIT[focal]
    done = m.state[ids[focal]] == "completed"
    paid = (DEPOSIT * MICRO - m.balance(OWNERS[focal])) / MICRO
    true_v = WEIGHT[focal] * PATIENCE[focal]
    return true_v * done - WEIGHT[focal] * waited - paid


def test_a_shaded_value_pays_live_under_ees_as_in_the_audit(tmp_path):
    jobs = scenario()
    table = audit(jobs, "ees", PARAMS, [Deviation("value", 0.5), Deviation("value", 2.0)],
                  job_ids=[int(jobs.workload.job_id[FOCAL])])
    gains = dict(zip(table["amount"], table["gain"]))
    assert gains[0.5] > 0 > gains[2.0]  # the audit: shading pays, overbidding does not
    truthful = live_utility(tmp_path / "truthful", 1.0)
    assert truthful == pytest.approx(float(table["truthful"].iloc[0]), abs=4 / MICRO)
    for factor, gain in gains.items():
        live_gain = live_utility(tmp_path / f"x{factor}", factor) - truthful
        assert np.sign(live_gain) == np.sign(gain)
        assert live_gain == pytest.approx(gain, abs=8 / MICRO)  # each of <= 4 decisions rounds once


def test_an_inflated_value_pays_live_under_relaxed_ees_as_in_the_audit(tmp_path):
    jobs = scenario(RELAXED_PROCS)
    table = audit(jobs, "relaxed-ees", PARAMS, [Deviation("value", 0.5), Deviation("value", 2.0)],
                  job_ids=[int(jobs.workload.job_id[RELAXED_FOCAL])])
    gains = dict(zip(table["amount"], table["gain"]))
    assert gains[2.0] > 0 > gains[0.5]  # the audit: overbidding pays, shading does not
    truthful = live_utility(tmp_path / "truthful", 1.0, RELAXED_PROCS, RELAXED_FOCAL)
    assert truthful == pytest.approx(float(table["truthful"].iloc[0]), abs=4 / MICRO)
    for factor, gain in gains.items():
        live_gain = live_utility(tmp_path / f"x{factor}", factor, RELAXED_PROCS, RELAXED_FOCAL) - truthful
        assert np.sign(live_gain) == np.sign(gain)
        assert live_gain == pytest.approx(gain, abs=8 / MICRO)  # each of <= 4 decisions rounds once
