"""The live engine drives the simulator's mechanism objects and, on a fake clock, makes exactly
the simulator's decisions and payments (one rule, one implementation)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine.records import FinalState
from marketsched.engine.simulator import SchedulingError, Simulator
from marketsched.live.replay import replay_live
from marketsched.mechanisms.online.priority import PriorityScheduler, make_priority_mechanism
from marketsched.platform.clock import FakeClock, WallClock
from marketsched.platform.engine import LiveEngine
from marketsched.workloads.workload import Workload
from reference_priority import BIDS, assert_matches, instances, parallel_instances
from reference_priority import simulate as reference


def random_workload(seed, n=60, nodes=3, parallel=False):
    rng = np.random.default_rng(seed)
    # integer-ish times make simultaneous events (same-timestamp batches) frequent
    submit = np.sort(rng.integers(0, 80, n)).astype(float)
    runtime = rng.integers(0, 25, n).astype(float)
    runtime += rng.random(n) * (rng.random(n) < 0.3)  # some fractional run times
    est = runtime * rng.uniform(0.5, 3.0, n)
    est[rng.random(n) < 0.1] = np.nan
    bid = rng.choice([0.5, 1.0, 2.0, 3.0, 5.0, 8.0], n) * rng.uniform(0.9, 1.1, n)
    bid[rng.random(n) < 0.2] = 2.0  # ties
    procs = rng.choice([1, 1, 2, nodes], n) if parallel else None
    w = Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=est, procs=procs, capacity=nodes)
    return w, bid


@pytest.mark.parametrize("rule", ["hb", "nphb", "wspt", "wsept"])
@pytest.mark.parametrize("pricing", ["kth", "first"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fake_clock_live_engine_equals_simulator(rule, pricing, seed):
    w, bid = random_workload(seed)
    sim = Simulator(w, make_priority_mechanism(rule, w, bid, pricing)).run()
    eng, live = replay_live(w, rule, bid, pricing)
    np.testing.assert_array_equal(live.first_start, sim.first_start)
    np.testing.assert_array_equal(live.end_time, sim.end_time)
    np.testing.assert_array_equal(live.preemptions, sim.preemptions)
    np.testing.assert_array_equal(live.state, sim.state)
    np.testing.assert_allclose(live.payment, sim.payment, rtol=1e-12, atol=1e-9)
    if rule == "hb":
        assert sim.preemptions.sum() > 0  # the workload exercises preemption


def test_hand_example_effects_in_order():
    # One node; job 0 (bid 2) at t=0 runs 10 s; job 1 (bid 5) at t=2 runs 3 s; job 2 (bid 3) at t=4 runs 1 s.
    w = Workload.from_columns(submit_time=[0, 2, 4], runtime=[10, 3, 1], capacity=1)
    eng, rec = replay_live(w, "hb", [2, 5, 3], "kth")
    assert rec.payment.tolist() == [10, 7, 2]
    assert rec.first_start.tolist() == [0, 2, 5]
    assert rec.preemptions.tolist() == [1, 0, 0]


def make_engine(rule="hb", pricing="kth", capacity=1):
    clock = FakeClock()
    mech = PriorityScheduler([], [], [], preemptive=(rule == "hb"), pricing=pricing, name=rule)
    return LiveEngine(mech, capacity, clock), clock


def test_accrued_and_rate_while_running():
    eng, clock = make_engine()
    a = eng.submit_job(2.0, 2.0, 1.0)
    assert eng.running[a] and eng.drain() == [("start", a, 0.0)]
    clock.set(3.0)
    assert eng.accrued(a) == 3.0  # empty queue: reservation price 1
    assert eng.payment[a] == 0.0  # accrued() settles nothing
    b = eng.submit_job(1.5, 1.5, 1.0)  # queued: k-th price becomes 1.5
    assert not eng.running[b] and eng.rate(a) == 1.5
    clock.set(5.0)
    assert eng.accrued(a) == pytest.approx(3.0 + 2 * 1.5)
    eng.complete(a)
    assert eng.payment[a] == pytest.approx(6.0)
    assert eng.running[b] and eng.state[a] == FinalState.COMPLETED


def test_withdraw_running_frees_node_and_settles():
    eng, clock = make_engine()
    a = eng.submit_job(2.0, 2.0, 1.0)
    b = eng.submit_job(1.0, 1.0, 1.0)
    eng.drain()
    clock.set(4.0)
    eng.withdraw(a)  # cancelled while running: pays k-th price 1 (b queued) for 4 s
    assert eng.payment[a] == 4.0
    assert eng.state[a] == FinalState.KILLED and eng.end_time[a] == 4.0
    assert eng.running[b] and eng.drain() == [("start", b, 4.0)]


def test_withdraw_queued_changes_the_kth_price():
    eng, clock = make_engine()
    a = eng.submit_job(9.0, 9.0, 1.0)
    b = eng.submit_job(4.0, 4.0, 1.0)
    c = eng.submit_job(3.0, 3.0, 1.0)
    clock.set(1.0)
    eng.withdraw(b)  # the best queued bid was 4, now 3
    assert eng.rate(a) == 3.0 and eng.state[b] == FinalState.KILLED and not eng.running[b]
    clock.set(2.0)
    eng.complete(a)
    assert eng.payment[a] == 4.0 + 3.0
    assert eng.running[c]


def test_process_ending_while_queued_is_withdrawn_as_completed():
    # A race: the broker preempts a job whose process has just exited; the exit is then
    # reported for a queued row.
    eng, clock = make_engine()
    a = eng.submit_job(2.0, 2.0, 1.0)
    clock.set(1.0)
    b = eng.submit_job(5.0, 5.0, 1.0)
    assert not eng.running[a]
    eng.complete(a)
    assert eng.state[a] == FinalState.COMPLETED and eng.running[b]
    with pytest.raises(SchedulingError, match="already ended"):
        eng.complete(a)


def test_bad_arrivals_change_nothing():
    eng, clock = make_engine(capacity=2)
    eng.submit_job(2.0, 2.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        eng.submit_job(math.nan, math.nan, 1.0)
    with pytest.raises(ValueError, match="processors"):
        eng.submit_job(1.0, 1.0, 1.0, procs=3)
    assert eng.n_jobs == 1 and len(eng.payment) == 1 and len(eng.policy.bid) == 1
    assert eng.submit_job(1.0, 1.0, 1.0) == 1 and eng.running[1]


def test_clock_never_goes_back():
    clock = FakeClock(5.0)
    with pytest.raises(ValueError, match="back"):
        clock.set(4.0)
    ticks = iter([10.0, 9.0])
    mech = PriorityScheduler([], [], [], preemptive=True, pricing="kth", name="hb")
    eng = LiveEngine(mech, 1, lambda: next(ticks))
    eng.submit_job(1.0, 1.0, 1.0)  # system clock stepped back: time stands still
    assert eng.now == 10.0
    w = WallClock(epoch=0.0)
    assert w() > 1e9


# ---------------------------------------------------------------------------- bid changes (rebid)
def test_rebid_by_hand_hb_kth():
    eng, clock = make_engine()
    a = eng.submit_job(2.0, 2.0, 1.0)
    b = eng.submit_job(1.0, 1.0, 1.0)
    assert eng.running[a] and eng.rate(a) == 1.0  # k-th price: the queued bid 1
    eng.drain()
    clock.set(3.0)
    eng.rebid(b, 5.0, 5.0)  # b outbids a: HB preempts a at once
    assert eng.drain() == [("preempt", a, 3.0), ("start", b, 3.0)]
    assert eng.payment[a] == 3.0 and eng.rate(b) == 2.0  # b pays a's bid
    clock.set(4.0)
    eng.rebid(a, 1.5, 1.5)  # a lowers its queued bid: b's k-th price follows
    assert eng.rate(b) == 1.5 and not eng.running[a]
    clock.set(6.0)
    eng.rebid(b, 1.0, 1.0)  # b lowers its running bid below a's: preempted
    assert eng.drain() == [("preempt", b, 6.0), ("start", a, 6.0)]
    assert eng.payment[b] == 2.0 * 1 + 1.5 * 2
    assert eng.rate(a) == 1.0
    clock.set(7.0)
    eng.complete(a)
    eng.complete(b)
    with pytest.raises(SchedulingError, match="not in the market"):
        eng.rebid(b, 3.0, 3.0)


def test_rebid_of_a_running_job_changes_its_first_price_from_then_on():
    eng, clock = make_engine(pricing="first", capacity=2)
    a = eng.submit_job(2.0, 2.0, 1.0)  # alone on two nodes: pays the reservation price 1
    clock.set(2.0)
    eng.submit_job(1.0, 1.0, 1.0)  # active jobs >= nodes from now: a pays its bid
    clock.set(4.0)
    eng.rebid(a, 3.0, 3.0)
    assert eng.running[a] and eng.rate(a) == 3.0
    clock.set(5.0)
    eng.complete(a)
    assert eng.payment[a] == 1.0 * 2 + 2.0 * 2 + 3.0 * 1


def test_a_refused_rebid_changes_nothing():
    eng, clock = make_engine()
    a = eng.submit_job(2.0, 2.0, 1.0)
    b = eng.submit_job(1.0, 1.0, 1.0)
    clock.set(5.0)
    with pytest.raises(SchedulingError, match="not in the market"):
        eng.batch(completed=[a], rebids=[(a, 3.0, 3.0)])  # ending and rebid in one batch
    with pytest.raises(SchedulingError, match="not in the market"):
        eng.batch(rebids=[(b, 3.0, 3.0), (7, 1.0, 1.0)])  # an unknown row
    assert eng.running[a] and eng.state[a] == FinalState.PENDING and eng.policy.bid == [2.0, 1.0]
    eng.complete(a)
    assert eng.payment[a] == 5.0 and eng.running[b]


@pytest.mark.parametrize("rule", ["hb", "nphb", "wsept"])
@pytest.mark.parametrize("pricing", ["kth", "first"])
def test_fake_clock_live_engine_equals_simulator_on_parallel_jobs(rule, pricing):
    # jobs of 1 to 3 CPUs on 3 nodes: the live engine and the simulator run one policy object
    # type on whole jobs (the live market's --cpus), with the same decisions and payments
    w, bid = random_workload(4, parallel=True)
    sim = Simulator(w, make_priority_mechanism(rule, w, bid, pricing, whole_jobs=True)).run()
    eng, live = replay_live(w, rule, bid, pricing)
    np.testing.assert_array_equal(live.first_start, sim.first_start)
    np.testing.assert_array_equal(live.end_time, sim.end_time)
    np.testing.assert_array_equal(live.preemptions, sim.preemptions)
    np.testing.assert_allclose(live.payment, sim.payment, rtol=1e-12, atol=1e-9)
    assert (w.procs > 1).sum() > 10 and (sim.state == FinalState.COMPLETED).all()
    if rule == "hb":
        assert sim.preemptions.sum() > 0


@settings(max_examples=100, deadline=None)
@given(parallel_instances(), st.data(), st.sampled_from(["hb", "nphb"]), st.sampled_from(["first", "kth"]))
def test_rebids_of_parallel_jobs_match_the_naive_reference(inst, data, rule, pricing):
    submit, runtime, bid, nodes, procs = inst
    changes = data.draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, len(submit) - 1), BIDS), max_size=6))
    w = Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=nodes, sort=False)
    eng, rec = replay_live(w, rule, bid, pricing, changes=changes)
    applied = []
    ref = reference(submit, runtime, bid, nodes, rule, pricing, changes=changes, applied=applied, procs=procs)
    assert eng.applied_changes == applied
    assert_matches(rec, ref, rule == "hb")


@st.composite
def instances_with_changes(draw):
    submit, runtime, bid, nodes = draw(instances())
    changes = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, len(submit) - 1), BIDS), max_size=8))
    return submit, runtime, bid, nodes, changes


@settings(max_examples=200, deadline=None)
@given(instances_with_changes(), st.sampled_from(["hb", "nphb", "wspt"]), st.sampled_from(["first", "kth"]))
def test_rebids_match_the_naive_reference(inst, rule, pricing):
    # bid changes in the live engine (the mechanism's rebid) against the naive reference, which
    # re-sorts everything at every event with the bids in force then and prices from the
    # definitions
    submit, runtime, bid, nodes, changes = inst
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=nodes, sort=False)
    eng, rec = replay_live(w, rule, bid, pricing, changes=changes)
    applied = []
    ref = reference(submit, runtime, bid, nodes, rule, pricing, changes=changes, applied=applied)
    assert eng.applied_changes == applied
    assert_matches(rec, ref, rule == "hb")
    assert (rec.state == FinalState.COMPLETED).all()
