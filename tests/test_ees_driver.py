"""EES and relaxed EES on the discrete-event engine (Mutz 2008, ch. 4 and 6; ees_driver)."""

import numpy as np
import pytest

from marketsched.engine.records import FinalState
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.backfilling import fcfs
from marketsched.mechanisms.online.ees import (
    EES,
    Discrete,
    QueueSnapshot,
    TypePrior,
    Uniform,
    expected_externality_payments,
)
from marketsched.mechanisms.online.ees_driver import (
    EESPolicy,
    RelaxedEESPolicy,
    declared_runtime,
    profile_of,
    queue_time,
    realised_utility,
    synthesize_types,
)
from marketsched.mechanisms.online.profile import AvailabilityProfile
from marketsched.workloads import first_jobs, load_trace, to_workload
from marketsched.workloads.synthetic import synthetic_workload
from marketsched.workloads.workload import Workload

COMPLETED, DISCARDED = int(FinalState.COMPLETED), int(FinalState.DISCARDED)


def workload(submit, runtime, procs, capacity, estimate=None):
    return Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=capacity,
                                 runtime_estimate=runtime if estimate is None else estimate)


# --------------------------------------------------------------------------- hand-worked: EES
def test_ees_policy_hand_worked():
    # Prior v in {0, 10}, d in {0, 2} (each 1/2); time unit 1 s, exact expectations.
    # J0 (t=0, r=4, v=5): idle machine, alone -> runs at 0, pays 0.
    # J1 (t=1, r=2, v=3, d=1) and J2 (t=2, r=3, v=10, d=2) queue while J0 runs.
    # t=4, head J1: b = d2 * r1 = 2 * 2 = 4 > 3 -> discard.
    #   xi_0(v=3) = E_s2[-2 s2 1{3 >= 2 s2}] = 1/2 * 0 + 1/2 * 0 (s2=2: b=4, discard) = 0
    #   xi_1(d=2) = E_s1[s1 1{s1 >= 4}] = 1/2 * 10 = 5 -> mu = (5 - 0, 0 - 5) = (5, -5)
    # t=4, J2 alone: runs at 4, pays 0. The discarded J1 *pays* 5 (AGV is not IR).
    prior = TypePrior(Discrete((0.0, 10.0), (0.5, 0.5)), Discrete((0.0, 2.0), (0.5, 0.5)))
    w = workload([0, 1, 2], [4, 2, 3], [1, 2, 1], capacity=2)
    v, d = [5.0, 3.0, 10.0], [1.0, 1.0, 2.0]
    pol = EESPolicy(v, d, prior, estimator="exact", time_unit=1.0)
    rec = Simulator(w, pol).run()
    assert rec.state.tolist() == [COMPLETED, DISCARDED, COMPLETED]
    np.testing.assert_array_equal(rec.first_start, [0.0, np.nan, 4.0])
    assert rec.end_time.tolist() == [4.0, 4.0, 7.0]
    np.testing.assert_allclose(rec.payment, [0.0, 5.0, -5.0])
    assert [len(dec.job_ids) for _, _, dec in pol.ledger.rows] == [1, 2, 1]
    assert pol.ledger.balance == pytest.approx({0: 0.0, 1: -5.0, 2: 5.0})
    # u = v 1{completed} - d * queue time - payment: (5 - 0 - 0, 0 - 1*3 - 5, 10 - 2*2 + 5)
    np.testing.assert_allclose(realised_utility(w, rec, v, d, time_unit=1.0), [5.0, -8.0, 11.0])


def test_ees_runs_one_job_at_a_time_and_time_unit_scales_delay_costs():
    # Two jobs of 1 proc on 4 procs: EES still runs them one after the other (full width).
    # With d per hour and r = 1800 s, b = d * 0.5 h: d = 30/h gives b = 15 > v = 10 -> discard.
    prior = TypePrior(Uniform(0, 100), Uniform(0, 100))
    w = workload([0, 0, 0], [1800, 1800, 60], [1, 1, 1], capacity=4)
    rec = Simulator(w, EESPolicy([50.0, 10.0, 0.0], [0.0, 0.0, 30.0], prior, n_draws=50)).run()
    assert rec.first_start[0] == 0.0 and rec.state[1] == DISCARDED and rec.first_start[2] == 1800.0
    rec = Simulator(w, EESPolicy([50.0, 10.0, 0.0], [0.0, 0.0, 30.0], prior, n_draws=50, time_unit=7200.0)).run()
    assert rec.first_start.tolist() == [0.0, 1800.0, 3600.0]  # b = 30 * 0.25 = 7.5 <= 10: runs


# --------------------------------------------------------------------------- hand-worked: relaxed EES
# 4 nodes; prior v in {0, 20}, d in {0, 2}; time unit 1 s; exact expectations.
# J0 (t=0, 2 nodes, estimate 10, really 6), J1 (t=1, 4 nodes, 5), J2 (t=2, 2 nodes, 3, v=3),
# J3 (t=3, 3 nodes, 2, d=2).
RELAXED = dict(submit=[0, 1, 2, 3], runtime=[6, 5, 3, 2], procs=[2, 4, 2, 3], capacity=4, estimate=[10, 5, 3, 2])
RELAXED_PRIOR = TypePrior(Discrete((0.0, 20.0), (0.5, 0.5)), Discrete((0.0, 2.0), (0.5, 0.5)))
RELAXED_V, RELAXED_D = [1.0, 1.0, 3.0, 1.0], [1.0, 1.0, 1.0, 2.0]


def _relaxed(compress):
    pol = RelaxedEESPolicy(RELAXED_V, RELAXED_D, RELAXED_PRIOR, estimator="exact", time_unit=1.0, compress=compress)
    return pol, Simulator(workload(**RELAXED), pol).run()


def test_relaxed_policy_hand_worked_fixed_commitments():
    # t=0: J0 alone runs now. t=1: J1 alone runs; 4 nodes free only at J0's planned end 10 ->
    # committed at 10 (timer). t=2, t=3: arrivals while J1 holds a reservation: no decision.
    # t=6: J0 ends early; its reservation [6, 10) is released. Queue [J2, J3], plan J1 [10, 15):
    #   with J2: J2 [6, 9) on 2 nodes, J3 (3 nodes, 2 s) finds no window before 15 -> 15;
    #   without J2: J3 at 6 -> delay 9, b = 2 * 9 = 18 > 3: discard J2.
    #   xi_0(v=3) = E_s3[-9 s3 1{3 >= 9 s3}] = 0; xi_1(d=2) = E_s2[s2 1{s2 >= 18}] = 10
    #   -> J2 pays 10, J3 receives 10. Then J3 alone: runs now (6), in the released time.
    # t=10: J1 starts at its committed time (not moved up without compression).
    pol, rec = _relaxed(compress=False)
    assert rec.state.tolist() == [COMPLETED, COMPLETED, DISCARDED, COMPLETED]
    np.testing.assert_array_equal(rec.first_start, [0.0, 10.0, np.nan, 6.0])
    np.testing.assert_allclose(rec.payment, [0.0, 0.0, 10.0, -10.0])
    rows = pol.ledger.rows
    assert [(t, dec.job_ids.tolist(), dec.runs) for _, t, dec in rows] == [
        (0.0, [0], True), (1.0, [1], True), (6.0, [2, 3], False), (6.0, [3], True)]
    assert rows[2][2].weights.tolist() == [9.0]
    assert pol.planned_start == {0: 0.0, 1: 10.0, 3: 6.0}


def test_relaxed_policy_hand_worked_with_compression():
    # As above, but at t=6 the commitment J1 moves up to 6 (4 nodes free). Then, plan J1 [6, 11):
    #   with J2: J2 [11, 14), J3 at 14; without: J3 at 11 -> delay 3, b = 6 > 3: discard J2;
    #   xi_1(d=2) = E_s2[s2 1{s2 >= 6}] = 10 -> payments (10, -10); J3 runs at 11 (committed).
    pol, rec = _relaxed(compress=True)
    assert rec.state.tolist() == [COMPLETED, COMPLETED, DISCARDED, COMPLETED]
    np.testing.assert_array_equal(rec.first_start, [0.0, 6.0, np.nan, 11.0])
    np.testing.assert_allclose(rec.payment, [0.0, 0.0, 10.0, -10.0])
    assert pol.ledger.rows[2][2].weights.tolist() == [3.0]
    assert pol.planned_start == {0: 0.0, 1: 10.0, 3: 11.0} and pol.moved_up == 1


# --------------------------------------------------------------------------- invariants on random instances
PRIOR = TypePrior(Uniform(0, 100), Uniform(0, 10))


def _random_case(seed, n=40, capacity=8):
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.integers(0, 4000, n)).astype(float)
    runtime = rng.integers(0, 900, n).astype(float)
    est = runtime * rng.uniform(1, 3, n)
    under = rng.random(n) < 0.1
    est[under] = runtime[under] * 0.5  # some under-estimates (declared r is raised to the run time)
    procs = rng.integers(1, capacity + 1, n)
    w = workload(submit, runtime, procs, capacity, np.round(est))
    v, d = synthesize_types(w, PRIOR, seed)
    return w, v, d


def _max_load(rec, w):
    """Largest number of processors in use at any time, from the records."""
    started = ~np.isnan(rec.first_start)
    t = np.concatenate([rec.first_start[started], rec.end_time[started]])
    delta = np.concatenate([w.procs[started], -w.procs[started]])
    order = np.lexsort((delta, t))  # ends (negative) before starts at the same time
    return int(np.max(np.cumsum(delta[order]), initial=0))


@pytest.mark.parametrize("kind", ["ees", "relaxed", "relaxed-fixed"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_on_random_instances(kind, seed):
    w, v, d = _random_case(seed)
    if kind == "ees":
        pol = EESPolicy(v, d, PRIOR, n_draws=64, seed=seed)
    else:
        pol = RelaxedEESPolicy(v, d, PRIOR, n_draws=64, seed=seed, compress=(kind == "relaxed"))
    rec = Simulator(w, pol).run()
    counts = rec.counts()
    # every job in exactly one final state, and only these two
    assert counts["completed"] + counts["discarded"] == len(w) and counts["pending"] == 0
    started = ~np.isnan(rec.first_start)
    assert np.array_equal(started, rec.state == COMPLETED)
    assert np.all(rec.first_start[started] >= w.submit_time[started])
    # capacity never exceeded; the EES never runs two jobs at once
    assert _max_load(rec, w) <= w.capacity
    if kind == "ees":
        s, e = rec.first_start[started], rec.end_time[started]
        order = np.argsort(s)
        assert np.all(s[order][1:] >= e[order][:-1])
    # one decision per job; engine payments equal the ledger, which balances (cached estimator)
    assert pol.decisions == len(w) == len(pol.ledger.rows)
    balance = np.array([pol.ledger.balance.get(j, 0.0) for j in range(len(w))])
    np.testing.assert_allclose(rec.payment, -balance, atol=1e-9)
    assert rec.payment.sum() == pytest.approx(pol.ledger.imbalance, abs=1e-9)
    assert abs(pol.ledger.imbalance) < 1e-9 * max(1.0, np.abs(rec.payment).sum())
    # every decision is the mechanism's on the same queue: run iff v >= sum_j w_j d_j
    for _, _, dec in pol.ledger.rows:
        b = float(np.dot(dec.weights, d[dec.job_ids[1:]] / 3600.0))
        assert dec.runs == (v[dec.job_ids[0]] >= b)
    if kind != "ees":
        for j, s in pol.planned_start.items():
            if kind == "relaxed-fixed":
                assert rec.first_start[j] == s           # committed starts are kept
            else:
                assert rec.first_start[j] <= s           # compression only moves jobs up


def test_charges_equal_mechanism_decisions_replayed():
    # Replaying the ledger's queues through a fresh mechanism with the same random stream gives
    # the same decisions and payments: the driver charges exactly what the mechanism decides.
    w, v, d = _random_case(5)
    prior_s = TypePrior(PRIOR.value, Uniform(0, 10 / 3600))  # delay costs per second
    r, _ = declared_runtime(w)
    pol = EESPolicy(v, d, PRIOR, n_draws=32, seed=3)
    Simulator(w, pol).run()
    assert any(len(dec.job_ids) > 2 for _, _, dec in pol.ledger.rows)
    mech, rng = EES(prior_s, 32), np.random.default_rng(3)
    for _, _, dec in pol.ledger.rows:
        ids = dec.job_ids
        again = mech.decide(QueueSnapshot(ids, v[ids], d[ids] / 3600, r[ids]), rng)
        assert again.runs == dec.runs
        np.testing.assert_allclose(again.payments, dec.payments, rtol=1e-12, atol=1e-12)
    # relaxed EES: the payments given the recorded delays (the profile is not recorded)
    pol = RelaxedEESPolicy(v, d, PRIOR, n_draws=32, seed=3)
    Simulator(w, pol).run()
    rng = np.random.default_rng(3)
    for _, _, dec in pol.ledger.rows:
        ids = dec.job_ids
        pay, _ = expected_externality_payments(v[ids[0]], d[ids[1:]] / 3600, dec.weights, prior_s, 32, rng)
        np.testing.assert_allclose(pay, dec.payments, rtol=1e-12, atol=1e-12)


def test_determinism_and_allocation_independent_of_draws():
    w, v, d = _random_case(7)
    for cls in (EESPolicy, RelaxedEESPolicy):
        a = Simulator(w, cls(v, d, PRIOR, n_draws=32, seed=11)).run()
        b = Simulator(w, cls(v, d, PRIOR, n_draws=32, seed=11)).run()
        c = Simulator(w, cls(v, d, PRIOR, n_draws=32, seed=12)).run()
        for col in ("first_start", "end_time", "payment", "state"):
            np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
        np.testing.assert_array_equal(a.first_start, c.first_start)   # same schedule
        np.testing.assert_array_equal(a.state, c.state)
        assert not np.array_equal(a.payment, c.payment)               # other payment estimates


# --------------------------------------------------------------------------- inputs and helpers
def test_declared_runtime_is_an_upper_bound():
    w = workload([0, 0, 0, 0], [10, 50, 0, 7], [1, 1, 1, 1], 2, estimate=[20, 40, 0, np.nan])
    r, adj = declared_runtime(w)
    assert r.tolist() == [20.0, 50.0, 1.0, 7.0]
    assert adj == {"missing": 1, "raised": 1, "floored": 1}


def test_synthesized_types_common_across_slices_and_in_prior():
    w = synthetic_workload(300, capacity=16, parallel=True, seed=0)
    v, d = synthesize_types(w, PRIOR, 4)
    v2, d2 = synthesize_types(first_jobs(w, 100), PRIOR, 4)
    np.testing.assert_array_equal(v[:100], v2)
    np.testing.assert_array_equal(d[:100], d2)
    assert v.min() >= 0 and v.max() <= 100 and d.min() >= 0 and d.max() <= 10
    assert abs(v.mean() - 50) < 6 and abs(d.mean() - 5) < 0.6
    v3, _ = synthesize_types(w, PRIOR, 5)
    assert not np.array_equal(v, v3)


def test_profile_of_equals_reserve():
    rng = np.random.default_rng(0)
    for _ in range(20):
        k = 12
        starts = rng.integers(5, 50, k).astype(float)
        ends = starts + rng.integers(1, 30, k)
        nodes = rng.integers(1, 3, k)
        a = profile_of(64, 5.0, starts, ends, nodes)
        b = AvailabilityProfile(64, 5.0)
        for s, e, n in zip(starts, ends, nodes):
            b.reserve(s, e - s, int(n))
        for t in np.linspace(5, 90, 200):
            assert a.free_at(t) == b.free_at(t)
        assert a.earliest_window(60, 7.0) == b.earliest_window(60, 7.0)
    with pytest.raises(ValueError, match="use 5 nodes of 4"):
        profile_of(4, 0.0, [0, 1], [3, 2], [3, 2])


def test_utility_of_fcfs_is_value_minus_waiting_cost():
    w, v, d = _random_case(3)
    rec = Simulator(w, fcfs()).run()
    u = realised_utility(w, rec, v, d)
    np.testing.assert_allclose(u, v - d * (rec.first_start - w.submit_time) / 3600.0)
    assert np.all(queue_time(w, rec) >= 0)


def test_bad_input_raises():
    w = workload([0, 1], [5, 5], [1, 1], 2)
    with pytest.raises(ValueError, match="2 jobs"):
        Simulator(w, EESPolicy([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], PRIOR)).run()
    with pytest.raises(ValueError, match="delay_cost must be >= 0"):
        EESPolicy([1.0, 2.0], [1.0, -1.0], PRIOR)
    with pytest.raises(ValueError, match="equal 1-D"):
        RelaxedEESPolicy([1.0, 2.0], [1.0], PRIOR)
    with pytest.raises(ValueError, match="not finite"):
        EESPolicy([np.nan, 2.0], [1.0, 1.0], PRIOR)
    with pytest.raises(ValueError, match="n_draws"):
        EESPolicy([1.0, 2.0], [1.0, 1.0], PRIOR, n_draws=0)
    with pytest.raises(ValueError, match="at least the actual"):
        Simulator(w, RelaxedEESPolicy([1.0, 2.0], [1.0, 1.0], PRIOR, runtime=[5.0, 4.0])).run()
    with pytest.raises(ValueError, match="seed"):
        synthesize_types(w, PRIOR, -1)


def test_on_a_real_trace_slice(trace_path):
    w, _ = to_workload(load_trace(str(trace_path("SDSC-SP2-1998-4.2-cln"))))
    w = first_jobs(w, 150)
    v, d = synthesize_types(w, PRIOR, 1)
    for pol in (EESPolicy(v, d, PRIOR, n_draws=32), RelaxedEESPolicy(v, d, PRIOR, n_draws=32)):
        rec = Simulator(w, pol).run()
        assert rec.counts()["completed"] + rec.counts()["discarded"] == len(w)
        assert _max_load(rec, w) <= w.capacity
        assert pol.decisions == len(w)
        assert abs(rec.payment.sum()) < 1e-6
