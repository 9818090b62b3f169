"""Incremental reruns (marketsched.engine.snapshot, marketsched.analysis.reruns) equal full reruns.

The audit may simulate a lie from a snapshot of the engine at the deviator's arrival instead of
from the start. That is sound only if nothing before the arrival depends on the deviator's
reports; these tests hold the two ways equal bit for bit (every job's schedule and payment, and
so the deviator's utility) on random small instances with ties (equal submit times, equal bids,
equal run times), for every mechanism that allows snapshots, over several focal jobs audited in
turn by one stepping engine.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis import audit as au
from marketsched.analysis.reruns import Reruns
from marketsched.engine.simulator import Simulator
from marketsched.engine.snapshot import resume, supports_snapshots, take
from marketsched.mechanisms.registry import build
from marketsched.scenario import prepare_jobs, run
from marketsched.workloads.workload import Workload

PRICED = [(rule, {"pricing": p}) for rule in ("hb", "nphb", "wspt", "wsept") for p in ("first", "kth")]
QUEUES = [("fcfs", {}), ("easy", {})]


@st.composite
def instance(draw, parallel: bool):
    """A small workload with ties (the same submit times, run times, bids and estimates recur)."""
    n = draw(st.integers(3, 14))
    cap = draw(st.integers(1, 4))
    submit = np.cumsum(draw(st.lists(st.sampled_from([0, 0, 3, 10]), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.sampled_from([0, 5, 10, 10, 40]), min_size=n, max_size=n))
    estimate = np.array(runtime, float) * np.array(draw(st.lists(st.sampled_from([1.0, 1.0, 2.0, 0.5]),
                                                                    min_size=n, max_size=n)))
    bid = draw(st.lists(st.sampled_from([0.5, 1.0, 3.0, 3.0, 10.0]), min_size=n, max_size=n))
    procs = draw(st.lists(st.integers(1, cap), min_size=n, max_size=n)) if parallel else None
    w = Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, procs=procs,
                              capacity=cap)
    jobs = prepare_jobs(w, "bimodal", 1, bid=np.array(bid))
    focal = sorted({draw(st.integers(0, n - 1)) for _ in range(draw(st.integers(1, 3)))})
    return jobs, [np.array([r]) for r in focal]


DEVIATIONS = st.one_of(
    st.builds(au.Deviation, st.just("value"), st.sampled_from([0.2, 0.5, 1.0, 1.5, 3.0, 3.3333])),
    st.builds(au.Deviation, st.just("estimate"), st.sampled_from([0.5, 1.0, 2.0])),
    st.builds(au.Deviation, st.just("delay"), st.sampled_from([0.0, 3.0, 7.0, 100.0])),
)


def _same(a, b):
    return a.records.equals(b.records)


def _check(jobs, mechanism, params, focal, devs):
    reruns = Reruns(jobs, mechanism, params, "incremental")
    assert reruns.incremental
    for i in reruns.order(focal):
        rows = focal[i]
        for dev in devs:
            jobs2, rows2 = au.deviate(jobs, rows, dev)
            inc = reruns.deviating(jobs2, int(rows.min()))
            full = run(jobs2, mechanism, params)
            assert _same(inc, full), (mechanism, params, rows, dev)
            if mechanism not in ("fcfs", "easy"):
                submit = jobs.workload.submit_time[rows]
                assert au.true_utility(jobs2, inc, rows2, submit) == au.true_utility(jobs2, full, rows2, submit)


@settings(max_examples=60, deadline=None)
@given(instance(parallel=False), st.sampled_from(PRICED), st.lists(DEVIATIONS, min_size=1, max_size=3))
def test_incremental_equals_full_rerun_priority_markets(case, mech, devs):
    jobs, focal = case
    _check(jobs, *mech, focal, devs)


@settings(max_examples=40, deadline=None)
@given(instance(parallel=True), st.sampled_from(QUEUES),
       st.lists(DEVIATIONS.filter(lambda d: d.kind != "value"), min_size=1, max_size=3))
def test_incremental_equals_full_rerun_queues(case, mech, devs):
    jobs, focal = case
    _check(jobs, *mech, focal, devs)


def test_audit_tables_are_the_same_either_way():
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=120, synthetic_nodes=4, seed=3), seed=3).build()
    devs = [au.Deviation("value", 0.5), au.Deviation("value", 2.0), au.Deviation("delay", 60.0)]
    for params in ({"pricing": "first"}, {"pricing": "kth"}):
        inc = au.audit(jobs, "hb", params, devs, per_band=3, seed=2, rerun="incremental")
        full = au.audit(jobs, "hb", params, devs, per_band=3, seed=2, rerun="full")
        assert inc.equals(full)
        assert (inc["gain"] != 0).any()  # the lies change something: the comparison is not vacuous


def test_pausing_the_engine_changes_nothing():
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=4, seed=5), seed=5).build()
    whole = run(jobs, "hb", {"pricing": "kth"}).records
    policy, _ = build("hb", jobs, {"pricing": "kth"})
    sim = Simulator(jobs.workload, policy)
    sim.begin()
    for t in np.quantile(jobs.workload.submit_time, [0.1, 0.5, 0.5, 0.9]):
        sim.proceed(before=float(t))
        take(sim)
    sim.proceed()
    assert sim.conclude().equals(whole)


def test_mechanisms_that_look_ahead_are_rerun_in_full():
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=30, synthetic_nodes=3, seed=1), seed=1).build()
    for name in ("dlgm", "ees"):
        policy, _ = build(name, jobs, None)
        assert not supports_snapshots(policy)
        assert not Reruns(jobs, name, None, "incremental").incremental
    with pytest.raises(ValueError, match="report_columns"):
        resume(Simulator(jobs.workload, policy), jobs.workload, policy, 0)


def test_a_snapshot_past_the_arrival_is_refused():
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=50, synthetic_nodes=3, seed=1), seed=1).build()
    policy, _ = build("hb", jobs, None)
    sim = Simulator(jobs.workload, policy)
    sim.begin()
    sim.proceed(before=float(jobs.workload.submit_time[30]) + 1)
    with pytest.raises(ValueError, match="past the arrival of row 10"):
        resume(sim, jobs.workload, build("hb", jobs, None)[0], 10)
    with pytest.raises(ValueError, match="rerun must be one of"):
        Reruns(jobs, "hb", None, "partial")
