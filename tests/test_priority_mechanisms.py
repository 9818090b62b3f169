"""HB, NPHB, WSPT, WSEPT with first and k-th price (Shudler et al. 2010, sections III and V)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine.records import FinalState
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.priority import PriorityScheduler, make_priority_mechanism
from marketsched.workloads.workload import Workload
from reference_priority import assert_matches, instances, parallel_instances
from reference_priority import simulate as reference


def run(submit, runtime, bid, nodes, rule, pricing, estimate=None):
    w = Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, capacity=nodes)
    sim = Simulator(w, make_priority_mechanism(rule, w, bid, pricing))
    return sim.run()


# One node. Job 0 (bid 2) at t=0 runs 10 s; job 1 (bid 5) at t=2 runs 3 s; job 2 (bid 3) at t=4 runs 1 s.
HAND = dict(submit=[0, 2, 4], runtime=[10, 3, 1], bid=[2, 5, 3], nodes=1)


def test_hb_by_hand():
    # HB: job 1 preempts job 0 at t=2 and ends at 5; job 2 runs 5-6; job 0 resumes 6-14.
    r = run(**HAND, rule="hb", pricing="kth")
    assert r.first_start.tolist() == [0, 2, 5]
    assert r.end_time.tolist() == [14, 5, 6]
    assert r.preemptions.tolist() == [1, 0, 0]
    # k-th: job 0 pays 1 (empty queue) on [0,2) and [6,14): 10. Job 1 pays 2 on [2,4)
    # (queue: job 0) and 3 on [4,5) (queue: jobs 0 and 2): 7. Job 2 pays 2 on [5,6).
    assert r.payment.tolist() == [10, 7, 2]
    # first price: the machine is always full (active >= 1 node), so everyone pays its bid.
    r = run(**HAND, rule="hb", pricing="first")
    assert r.payment.tolist() == [2 * 10, 5 * 3, 3 * 1]


def test_nphb_by_hand():
    r = run(**HAND, rule="nphb", pricing="kth")
    assert r.first_start.tolist() == [0, 10, 13]
    assert r.preemptions.tolist() == [0, 0, 0]
    # job 0: 1 on [0,2) (empty queue), then min(2, max queued) = 2 on [2,10): 2 + 16 = 18
    # job 1: min(5, 3) = 3 on [10,13): 9; job 2: empty queue, 1 on [13,14)
    assert r.payment.tolist() == [18, 9, 1]


def test_wspt_by_hand():
    # Keys w/tau: job0 2/10 = 0.2, job1 5/3, job2 3/1 = 3. One node, non-preemptive.
    r = run(**HAND, rule="wspt", pricing="kth")
    assert r.first_start.tolist() == [0, 11, 10]  # job 2 (ratio 3) runs before job 1 (5/3)
    # job 0: 1 on [0,2); then queued best ratio r* (5/3, then 3) times tau_0=10, capped at bid 2: 2 on [2,10)
    # job 2 on [10,11): queue {job1}: min(3, 5/3 * 1) = 5/3. job 1 on [11,14): empty queue, 1 each second.
    np.testing.assert_allclose(r.payment, [2 + 16, 3, 5 / 3])


def test_wspt_divides_by_sub_second_run_times():
    # One node. Job 0 (bid 1, 10 s) runs from t=0. At t=1 job 1 (bid 1, 0.5 s: ratio 2) and
    # job 2 (bid 1.5, 1 s: ratio 1.5) queue. Smith's ratio puts job 1 first; rounding its run
    # time up to 1 s (ratio 1) would put job 2 first.
    r = run([0, 1, 1], [10, 0.5, 1], [1, 1, 1.5], 1, "wspt", "kth")
    assert r.first_start.tolist() == [0, 10, 10.5]
    # k-th price: job 0 pays 1 on [0,1) (empty queue), then min(1, 10 * 2) = 1 on [1,10): 10.
    # Job 1 on [10,10.5) with job 2 queued: min(1, 0.5 * 1.5) = 0.75 per second: 0.375.
    # Job 2 on [10.5,11.5), empty queue: 1.
    np.testing.assert_allclose(r.payment, [10, 0.375, 1])
    # WSEPT reads the same ratio off the estimates: 0.5 s estimated, 3 s actual for job 1
    r = run([0, 1, 1], [10, 3, 1], [1, 1, 1.5], 1, "wsept", "kth", estimate=[10, 0.5, 1])
    assert r.first_start.tolist() == [0, 10, 13]
    np.testing.assert_allclose(r.payment, [10, 3 * 0.75, 1])


def test_wspt_zero_runtime_goes_first_and_pays_nothing():
    # One node. Job 0 (bid 2, 10 s) runs from t=0; job 1 (bid 3, 0 s: key +inf) queues at t=1,
    # job 2 (bid 100, 1 s: key 100) at t=2. Job 1 goes first at t=10 and ends at once; job 2
    # starts at the same time. While job 1 waits (k* = +inf) job 0 pays its bid.
    r = run([0, 1, 2], [10, 0, 1], [2, 3, 100], 1, "wspt", "kth")
    assert r.first_start.tolist() == [0, 10, 10]
    assert r.end_time.tolist() == [10, 10, 11]
    assert r.payment.tolist() == [1 + 2 * 9, 0, 1]
    # a bid of 0 with run time 0 (0/0) is still the key +inf
    r = run([0, 1, 2], [10, 0, 1], [2, 0, 100], 1, "wspt", "kth")
    assert r.first_start.tolist() == [0, 10, 10]


@settings(max_examples=100, deadline=None)
@given(instances(), st.sampled_from(["nphb", "wspt"]), st.sampled_from(["first", "kth"]))
def test_matches_naive_reference_with_sub_second_run_times(inst, rule, pricing):
    submit, runtime, bid, nodes = inst
    runtime = [r / 4 for r in runtime]  # quarter seconds: exact in binary floating point
    r = run(submit, runtime, bid, nodes, rule, pricing)
    fs, end, _, pay = reference(submit, runtime, bid, nodes, rule, pricing)
    np.testing.assert_array_equal(r.first_start, fs)
    np.testing.assert_array_equal(r.end_time, end)
    np.testing.assert_allclose(r.payment, pay, rtol=1e-9, atol=1e-9)


def test_first_price_reservation_when_machine_not_full():
    # Two nodes, one job: fewer active jobs than nodes, so it pays the reservation price 1.
    r = run([0], [5], [7], 2, "hb", "first")
    assert r.payment.tolist() == [5]


def test_wsept_uses_estimates_and_falls_back():
    # Job 1 has the better estimated ratio (4/2 > 3/10) though its actual run time is long.
    w = Workload.from_columns(submit_time=[0, 1, 1], runtime=[5, 20, 1], runtime_estimate=[5, 2, np.nan], capacity=1)
    mech = make_priority_mechanism("wsept", w, [1, 4, 3], "first")
    r = Simulator(w, mech).run()
    assert r.first_start.tolist() == [0, 6, 5]  # job 2 falls back to its run time 1: ratio 3 > 2
    assert mech.fallback_estimates == 1


@settings(max_examples=225, deadline=None)  # 150 for first and kth before kth-uncapped joined
@given(instances(), st.sampled_from(["hb", "nphb", "wspt"]), st.sampled_from(["first", "kth", "kth-uncapped"]))
def test_matches_naive_reference(inst, rule, pricing):
    submit, runtime, bid, nodes = inst
    r = run(submit, runtime, bid, nodes, rule, pricing)
    assert_matches(r, reference(submit, runtime, bid, nodes, rule, pricing), rule == "hb")
    assert (r.state == FinalState.COMPLETED).all()


class Audited(PriorityScheduler):
    """HB that checks the paper's invariants after every decision."""

    def step(self, t, arrived, completed):
        super().step(t, arrived, completed)
        sim = self.sim
        running = [j for j in range(sim.n_jobs) if sim.running[j]]
        assert sim.used == len(running) <= sim.capacity
        queued = [row for _, row in self.waiting]
        if self.preemptive:
            # the running set is the top-n active jobs by (bid desc, submission)
            active = sorted(running + queued, key=lambda j: self.prio[j])
            assert set(running) == set(active[: sim.capacity])
        else:
            # work conserving: a job waits only when every node is busy
            assert not queued or sim.used == sim.capacity


@settings(max_examples=60, deadline=None)
@given(instances(), st.booleans())
def test_invariants_on_random_instances(inst, preemptive):
    submit, runtime, bid, nodes = inst
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=nodes)
    bid = np.asarray(bid, float)
    Simulator(w, Audited(bid, bid, np.ones_like(bid), preemptive, "kth")).run()


@settings(max_examples=100, deadline=None)
@given(instances(), st.sampled_from(["hb", "nphb", "wspt"]))
def test_kth_le_first_le_bid(inst, rule):
    submit, runtime, bid, nodes = inst
    bid = [max(b, 1.0) for b in bid]  # the reservation price is 1: below it first price exceeds the bid
    first = run(submit, runtime, bid, nodes, rule, "first")
    kth = run(submit, runtime, bid, nodes, rule, "kth")
    # the allocation does not depend on the payment scheme
    np.testing.assert_array_equal(first.first_start, kth.first_start)
    np.testing.assert_array_equal(first.end_time, kth.end_time)
    tol = 1e-9
    assert (kth.payment <= first.payment + tol).all()
    assert (first.payment <= np.asarray(bid) * np.asarray(runtime) + tol).all()


def test_deterministic_and_states_add_up():
    rng = np.random.default_rng(7)
    n = 2000
    submit = np.sort(rng.integers(0, 20_000, n))
    runtime = rng.integers(0, 500, n)
    bid = rng.uniform(0, 100, n)
    a = run(submit, runtime, bid, 8, "hb", "kth")
    b = run(submit, runtime, bid, 8, "hb", "kth")
    assert a.equals(b)
    counts = a.counts()
    assert sum(counts.values()) == n and counts["completed"] == n


def test_until_kills_unfinished_jobs_and_counts_them():
    w = Workload.from_columns(submit_time=[0, 1, 50], runtime=[10, 10, 1], capacity=1)
    sim = Simulator(w, make_priority_mechanism("hb", w, [1, 2, 3], "kth"))
    r = sim.run(until=5)
    assert r.counts()["killed"] == 3
    assert r.end_time.tolist() == [5, 5, 5]
    # job 1 ran 1..5 with job 0 queued (price 1): 4; job 0 ran 0..1 alone: 1
    assert r.payment.tolist() == [1, 4, 0]


@pytest.mark.parametrize(
    "bid, message",
    [([1.0, float("nan")], "row 1"), ([1.0], "one bid per job"), ([1.0, float("inf")], "not a finite number")],
)
def test_bad_bids_are_named(bid, message):
    w = Workload.from_columns(submit_time=[0, 1], runtime=[1, 1], capacity=1)
    with pytest.raises(ValueError, match=message):
        make_priority_mechanism("hb", w, bid)


@settings(max_examples=150, deadline=None)
@given(parallel_instances(), st.sampled_from(["hb", "nphb", "wspt"]), st.sampled_from(["first", "kth"]))
def test_whole_parallel_jobs_match_naive_reference(inst, rule, pricing):
    """Whole parallel jobs (the live market's ``--cpus``): the strict list order and the price per
    processor, against the reference's definitions on random instances with ties."""
    submit, runtime, bid, nodes, procs = inst
    w = Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=nodes)
    r = Simulator(w, make_priority_mechanism(rule, w, bid, pricing, whole_jobs=True)).run()
    assert_matches(r, reference(submit, runtime, bid, nodes, rule, pricing, procs=procs), rule == "hb")
    assert (r.state == FinalState.COMPLETED).all()


def test_whole_parallel_job_waits_blocks_the_order_and_pays_per_processor():
    """4 nodes, HB, first price. t=0: job 0 (1 proc, bid 5) and job 1 (2 procs, bid 2) start;
    t=1: job 2 (4 procs, bid 3) preempts job 1 but does not fit beside job 0, so it waits and
    job 1 (after it in the order) waits too, with 3 nodes idle; t=2: job 0 ends, job 2 runs on
    all 4 (paying 4 x its bid 3 while saturated), then job 1."""
    w = Workload.from_columns(submit_time=[0, 0, 1], runtime=[2, 2, 1], procs=[1, 2, 4], capacity=4)
    r = Simulator(w, make_priority_mechanism("hb", w, [5, 2, 3], "first", whole_jobs=True)).run()
    assert r.first_start.tolist() == [0, 0, 2]
    assert r.end_time.tolist() == [2, 4, 3]
    assert r.preemptions.tolist() == [0, 1, 0]
    # job 2 pays 4 procs x bid 3 x 1 s (active CPUs 4+2 >= 4); job 1 ran 1 s unsaturated at
    # t=0 (3 CPUs asked: the reservation price 1 x 2 procs), then 1 s alone (1 x 2); job 0 ran
    # 1 s unsaturated, then 1 s saturated (CPUs asked 1+2+4) at its bid 5
    assert r.payment.tolist() == [1 * 1 + 5 * 1, 2 * 1 + 2 * 1, 12]


def test_parallel_jobs_rejected_with_advice():
    w = Workload.from_columns(submit_time=[0, 1], runtime=[1, 1], procs=[1, 2], capacity=2)
    with pytest.raises(ValueError, match="split parallel jobs"):
        Simulator(w, make_priority_mechanism("hb", w, [1, 1])).run()


def test_unknown_rule_and_pricing():
    w = Workload.from_columns(submit_time=[0], runtime=[1], capacity=1)
    with pytest.raises(ValueError, match="unknown allocation rule"):
        make_priority_mechanism("fifo", w, [1])
    with pytest.raises(ValueError, match="unknown pricing"):
        make_priority_mechanism("hb", w, [1], "second")


def test_jobs_added_while_running_match_a_static_run():
    """The live market adds jobs as they are submitted: the result must not depend on it."""
    submit, runtime, bid, nodes = [0, 1, 2, 2, 5], [4, 3, 2, 6, 1], [2.0, 5.0, 3.0, 3.0, 9.0], 2
    static = run(submit, runtime, bid, nodes, "nphb", "kth")
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=nodes)
    bid = np.asarray(bid)
    mech = PriorityScheduler(bid[:2], bid[:2], np.ones(2), preemptive=False, pricing="kth")
    mech.add_jobs(bid[2:], bid[2:], np.ones(3))
    dynamic = Simulator(w, mech).run()
    assert dynamic.equals(static)


def test_uncapped_kth_charges_a_wspt_job_above_its_bid_and_leaves_nphb_capped():
    # One node. Job 0 (bid 1, run time 10: ratio 0.1) starts alone at 0; job 1 (bid 8, run time 2:
    # ratio 4) arrives at 1 and waits. From 1 to 10 job 0's ratio is below the best queued one, so the
    # capped rule charges its bid 1 per second and the paper's formula 4 * 10 = 40 per second.
    for rule, uncapped_pay0 in (("wspt", 1 * 1 + 40 * 9), ("nphb", 1 * 1 + 1 * 9)):
        capped = run([0, 1], [10, 2], [1, 8], 1, rule, "kth")
        uncapped = run([0, 1], [10, 2], [1, 8], 1, rule, "kth-uncapped")
        assert capped.payment[0] == 1 * 10
        assert uncapped.payment[0] == uncapped_pay0
        assert uncapped.payment[1] == capped.payment[1] == 2  # alone: the reservation price 1
