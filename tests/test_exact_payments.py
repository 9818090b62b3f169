"""Payments against exact (fractions) references on wide spreads: bids 10^0..10^16, times up to
2^40 (Shudler et al. 2010, sections IV and V). The k-th and first price integrate a price path
over each job's run; a running total differenced at start and stop loses a small payment once
the total is large, so these instances put a small payment after a large one on purpose. DLGM
and P-DLGM (Stößer 2009, sections 5.3-5.4) sum the weights a newcomer displaces: a small weight
behind a huge one, or after others came and went, must not be lost. Both engines (the Python
reference and the compiled kernel) are checked."""

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine import compiled
from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.dlgm import run_dlgm
from marketsched.mechanisms.online.priority import RULES, make_priority_mechanism
from marketsched.workloads.workload import Workload
from reference_dlgm import reference as dlgm_reference
from reference_dlgm import wide_instances as wide_dlgm_instances
from reference_priority import simulate_exact
from test_compiled import engine

TOL = 1e-12  # relative error allowed (the sums are exact up to a few units in the last place)
def dlgm_kernel_built() -> bool:
    try:
        from marketsched.mechanisms.online import _dlgm_kernel  # noqa: F401
    except ImportError:
        return False
    return True


ENGINES = ["python"] + (["compiled"] if compiled.available("_priority") or compiled.mode() == "compiled" else [])


def run(mode, submit, runtime, bid, nodes, rule, pricing, estimate=None):
    w = Workload.from_columns(submit_time=submit, runtime=runtime, runtime_estimate=estimate, capacity=nodes)
    with engine(mode):
        return Simulator(w, make_priority_mechanism(rule, w, bid, pricing)).run()


def assert_exact(paid, exact, what=""):
    for j, (p, x) in enumerate(zip(paid, exact)):
        err = abs(Fraction(p) - x)
        assert err <= TOL * abs(x), f"{what} job {j}: paid {p!r}, exact {float(x)!r} (relative error {float(err / x)})"


@pytest.mark.parametrize("mode", ENGINES)
def test_hb_kth_small_payment_after_a_huge_one(mode):
    # One node, all at t=0: (run 100, bid 1e20), (run 10, bid 1e19), (run 10, bid 1). The first job
    # pays 1e19 for 100 s; the second runs with the third queued (k* = 1): 10; the third alone: 10.
    r = run(mode, [0, 0, 0], [100, 10, 10], [1e20, 1e19, 1], 1, "hb", "kth")
    assert r.payment.tolist() == [1e21, 10.0, 10.0]


@pytest.mark.parametrize("mode", ENGINES)
def test_wspt_kth_third_after_a_long_clock(mode):
    # One node, WSPT. Job 0 (run 2^40, bid 1) runs from 0 while job 1 (run 2^-10, bid 1: ratio
    # 1024) waits all that time: the running integral of k* reaches about 2^50. Then job 2
    # (run 1, bid 1) runs with job 3 (run 3, bid 1, ratio 1/3) queued: it pays 1/3.
    T = 2.0**40
    submit, runtime = [0, 1, T + 1, T + 1], [T, 2.0**-10, 1, 3]
    r = run(mode, submit, runtime, [1, 1, 1, 1], 1, "wspt", "kth")
    assert r.end_time.tolist() == [T, T + 2.0**-10, T + 2, T + 5]
    assert r.payment.tolist() == [T, 2.0**-10, 1 / 3, 3.0]


@pytest.mark.parametrize("mode", ENGINES)
@pytest.mark.parametrize("rule", RULES)
def test_first_price_short_run_across_a_binade(mode, rule):
    # One node. Job 0 (bid 2) keeps the machine full for 2^40 - 3 * 2^-13 s (just under 2^40,
    # where the float grid is 2^-13); after an idle gap job 1 (bid 10) runs alone for 2^-11 s,
    # the machine full: it pays 10 * 2^-11. A running total of the full time would cross 2^40
    # during job 1's run, where its grid doubles to 2^-12, and lose a quarter of it.
    T = 2.0**40
    submit, runtime = [0, T + 1], [T - 3 * 2.0**-13, 2.0**-11]
    r = run(mode, submit, runtime, [2, 10], 1, rule, "first")
    assert r.payment.tolist() == [2 * (T - 3 * 2.0**-13), 10 * 2.0**-11]


@st.composite
def wide_instances(draw):
    """Small instances with bids spread over 10^0..10^16, run times from 2^-11 to 2^40 and submit
    times near 2^40 (after a gap from 0, or from a first burst at 0), with equal values drawn often."""
    n = draw(st.integers(2, 9))
    nodes = draw(st.integers(1, 3))
    base = draw(st.sampled_from([0.0, 2.0**40, 2.0**40 + 1, 2.0**40 - 2.0**20]))
    offsets = sorted(draw(st.lists(st.sampled_from([0, 0.5, 1, 3, 2.0**10, 2.0**20, 2.0**30 + 1]),
                                   min_size=n, max_size=n)))
    submit = [0.0] + [base + o for o in offsets[1:]]  # one job at 0: a long clock before the rest
    runtime = draw(st.lists(st.sampled_from([2.0**-11, 0.75, 1, 3, 10, 2.0**20 + 1, 2.0**30, 2.0**40 - 3 * 2.0**-13]),
                            min_size=n, max_size=n))
    bid = draw(st.lists(st.integers(0, 16).map(lambda e: 10.0**e) | st.sampled_from([0.3, 1 / 3, 7.0]),
                        min_size=n, max_size=n))
    estimate = draw(st.lists(st.sampled_from([math.nan, 1, 2.0**30, 0.1]), min_size=n, max_size=n))
    return submit, runtime, bid, nodes, estimate


@pytest.mark.parametrize("mode", ENGINES)
@pytest.mark.parametrize("pricing", ["first", "kth", "kth-uncapped"])
@pytest.mark.parametrize("rule", RULES)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(inst=wide_instances())
def test_payments_match_exact_reference_on_wide_spreads(inst, rule, pricing, mode):
    # (kth-uncapped has no kernel: it runs the Python path under both modes)
    submit, runtime, bid, nodes, estimate = inst
    r = run(mode, submit, runtime, bid, nodes, rule, pricing, estimate)
    end, exact = simulate_exact(submit, runtime, bid, nodes, rule, pricing, estimate)
    assert r.end_time.tolist() == end
    assert_exact(r.payment.tolist(), exact, f"{rule} {pricing}")


# ---------------------------------------------------------------------------- every entry checks its numbers
@pytest.mark.parametrize("rule", RULES)
def test_negative_bid_is_refused_naming_the_job(rule):
    w = Workload.from_columns(submit_time=[0, 0], runtime=[1, 1], capacity=1, job_id=[7, 8])
    with pytest.raises(ValueError, match=r"bid of job row 1 \(job 8\) is -1.0, not a finite number >= 0"):
        make_priority_mechanism(rule, w, [2.0, -1.0])


@pytest.mark.parametrize(
    "bid, key, cost, message",
    [
        ([1.0, float("inf")], [1.0, float("inf")], [1.0, 1.0], "bid of job row 1 is inf"),
        ([1.0, -1.0], [1.0, -1.0], [1.0, 1.0], "bid of job row 1 is -1.0"),
        ([1.0, 1.0], [1.0, float("nan")], [1.0, 1.0], "priority of job row 1 is NaN"),
        ([1.0, 1.0], [1.0, float("inf")], [1.0, 1.0], "priority of job row 1 is inf"),
        ([1.0, 1.0], [1.0, 0.0], [1.0, float("inf")], r"cost \(key divisor\) of job row 1 is inf"),
        ([1.0, 1.0], [1.0, 1.0], [1.0, float("nan")], r"cost \(key divisor\) of job row 1 is NaN"),
    ],
)
def test_priority_scheduler_built_directly_checks_its_jobs(bid, key, cost, message):
    from marketsched.mechanisms.online.priority import PriorityScheduler

    with pytest.raises(ValueError, match=message):
        PriorityScheduler(bid, key, cost, preemptive=False)
    mech = PriorityScheduler([1.0], [1.0], [1.0], preemptive=False)
    with pytest.raises(ValueError, match=message.replace("row 1", "row 2")):
        mech.add_jobs(bid, key, cost)
    # a job that takes no time has the key +inf (WSPT, WSEPT): accepted
    PriorityScheduler([1.0], [float("inf")], [0.0], preemptive=False)


def test_infinite_run_time_estimate_is_refused_by_the_workload():
    # an estimate of +inf used to pass (only NaN or >= 0 was checked) and gave WSEPT a NaN k-th payment
    with pytest.raises(ValueError, match=r"runtime_estimate.*row 1 \(job 2\) is inf"):
        Workload.from_columns(submit_time=[0, 0], runtime=[1, 1], runtime_estimate=[1.0, float("inf")], capacity=1)


# ---------------------------------------------------------------------------- a real trace
def _exact_kth_script():
    """benchmarks/exact_kth_payments.py (the whole-trace check), loaded as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "exact_kth_payments.py"
    spec = importlib.util.spec_from_file_location("exact_kth_payments", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.trace
@pytest.mark.parametrize("rule", ["hb", "wspt", "wsept"])
def test_kth_payments_exact_on_a_kth_sp2_slice(rule, trace_path):
    trace_path("KTH-SP2-1996-2.1-cln")  # skips without MARKETSCHED_TRACES
    script = _exact_kth_script()
    w, values = script.workload("KTH-SP2-1996-2.1-cln", jobs=400)
    worst, at, above, same = script.errors(w, rule, values)
    assert same, "the compiled kernel's payments differ from the Python path's"
    assert worst <= 1e-12 and above == 0, f"job row {at}: relative error {worst}"


# ---------------------------------------------------------------------------- the sums themselves
@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1e-300, 2.0**-40, 1 / 3, 1.0, 7.5, 1e16, 1e200]),
                          st.booleans()), min_size=1, max_size=60))
def test_interval_sums_against_exact_sums(steps):
    """Amounts of every size, marks anywhere: the sum since any mark is the exact sum within a
    few units in the last place (only non-negative amounts are ever added)."""
    from marketsched.mechanisms.online.interval_sums import IntervalSums

    sums = IntervalSums()
    marks = []  # (mark, exact sum of the amounts before it)
    total = Fraction(0)
    for amount, mark in steps:
        if mark:
            marks.append((sums.mark(), total))
        sums.add(amount)
        total += Fraction(amount)
    for m, before in marks:
        exact = total - before
        assert sums.peek(m) == pytest.approx(float(exact), rel=1e-14, abs=0)
        assert abs(Fraction(sums.since(m)) - exact) <= 1e-14 * exact


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from([2.0**-12, 1 / 3, 0.75, 3.0, 2.0**20 + 1, 2.0**40 - 3 * 2.0**-13]),
                          st.booleans()), min_size=1, max_size=60))
def test_time_sum_against_exact_time(steps):
    """Spans between clock readings (each a difference of two floats, as the engine's dt): the
    time since any reading is exact within a few units in the last place, however long the clock."""
    from marketsched.mechanisms.online.interval_sums import TimeSum

    clock, total = 0.0, TimeSum()
    marks = []  # (reading, clock then)
    for span, mark in steps:
        if mark:
            marks.append((total.mark(), clock))
        t = clock + span
        total.add(t - clock)
        clock = t
    for reading, then in marks:
        exact = Fraction(clock) - Fraction(then)
        assert abs(Fraction(total.since(reading)) - exact) <= 8 * 2.0**-53 * exact


# ---------------------------------------------------------------------------- DLGM and P-DLGM
# The weight a newcomer displaces is summed directly over the jobs behind it (never a node's
# total minus the weight ahead), so a small weight behind a huge one is not lost and removed
# weights leave no residue (Stößer 2009, sections 5.3-5.4: p^_j(n) = d~_j * sum of the weights
# of the jobs j displaces, each of which receives v~_k d~_j).
DLGM_ENGINES = ["python"] + (["compiled"] if dlgm_kernel_built() or compiled.mode() == "compiled" else [])


def dlgm(mode, submit, runtime, bid, nodes, preemptive, **kwargs):
    w = Workload.from_columns(submit_time=submit, runtime=runtime, capacity=nodes)
    with engine(mode):
        return run_dlgm(w, bid, preemptive, **kwargs)


@pytest.mark.parametrize("mode", DLGM_ENGINES)
@pytest.mark.parametrize("preemptive", [False, True])
@pytest.mark.parametrize("bid, owed", [([1e200, 1e150, 1, 2], 1), ([10, 0.2, 0.1, 0.15], 0.1)])
def test_dlgm_small_weight_behind_a_newcomer_is_paid_exactly(mode, preemptive, bid, owed):
    # One node; job 0 (the highest weight: ahead of everyone under both mechanisms) runs from 0.
    # At 0.5 jobs 1, 2 and 3 (1 s each) queue; job 3 goes between jobs 1 and 2 and pays job 2 its
    # weight, which job 2 receives: the payments sum to exactly 0. As the node's total minus the
    # weight ahead, 1e150 + 1 - 1e150 gave 0 and (0.2 + 0.1) - 0.2 gave 0.10000000000000003.
    rec, pol = dlgm(mode, [0, 0.5, 0.5, 0.5], [1, 1, 1, 1], bid, 1, preemptive)
    assert pol.tentative_payment.tolist() == [0, 0, 0, owed]
    assert rec.payment.tolist() == [0, 0, -owed, owed]
    assert rec.payment.sum() == 0
    assert rec.end_time.tolist() == [1, 2, 4, 3]


@pytest.mark.parametrize("mode", DLGM_ENGINES)
@pytest.mark.parametrize("preemptive", [False, True])
def test_dlgm_exact_node_tie_stays_a_tie(mode, preemptive):
    # Two nodes. Jobs 0 (2 s) and 1 (3 s) run from 0 on nodes 0 and 1. At 1 (all 1 s): job 2
    # (weight 0.2) joins node 0, job 3 (0.1) node 0 (a tie: work 2 on both), job 4 (0.1) node 1.
    # Job 5 (0.15) then sees on each node 2 s of work ahead and one job of weight 0.1 behind: an
    # exact tie, which goes to node 0 (not to node 1 for a residue of 2.8e-17 on node 0).
    rec, pol = dlgm(mode, [0, 0, 1, 1, 1, 1], [2, 3, 1, 1, 1, 1], [1, 1, 0.2, 0.1, 0.1, 0.15], 2, preemptive)
    assert pol.node.tolist() == [0, 1, 0, 0, 1, 0]
    assert pol.tentative_payment.tolist() == [0, 0, 0, 0, 0, 0.1]
    assert rec.payment.tolist() == [0, 0, 0, -0.1, 0, 0.1]
    assert rec.first_start.tolist() == [0, 0, 2, 4, 3, 3]


@pytest.mark.parametrize("mode", DLGM_ENGINES)
def test_dlgm_short_displacer_after_a_long_history_is_credited_exactly(mode):
    # One node. Job 0 (1 s, weight 1e6) runs from 0; job 1 (2^40 s, weight 2^40: ratio 1) queues
    # at 0.5 and runs from 1, so the node's ledger of the run times that joined it reads 2^40.
    # Job 2 (1 s, weight 1e-3) queues at 2; job 3 (0.1 s, weight 1: ratio 10) goes ahead of it at
    # 3 and pays it 1e-3 x 0.1. Job 2 is owed the ledger's growth during its wait, 0.1 s (as a
    # plain running sum (2^40 + 0.1) - 2^40 = 0.10009765625).
    T = 2.0**40
    rec, pol = dlgm(mode, [0, 0.5, 2, 3], [1, T, 1, 0.1], [1e6, T, 1e-3, 1], 1, False)
    assert pol.tentative_payment.tolist() == [0, 0, 0, 1e-3 * 0.1]
    assert pol.received.tolist() == [0, 0, 1e-3 * 0.1, 0]
    assert rec.payment.sum() == 0


def assert_close(got, exact, what):
    for j, (g, x) in enumerate(zip(got, exact)):
        err = abs(Fraction(g) - x)
        assert err <= TOL * abs(x), f"{what} of job {j}: {g!r}, exact {float(x)!r}"


@pytest.mark.parametrize("mode", DLGM_ENGINES)
@pytest.mark.parametrize("preemptive", [False, True])
@settings(max_examples=80, deadline=None, derandomize=True)
@given(inst=wide_dlgm_instances())
def test_dlgm_payments_match_exact_reference_on_wide_spreads(inst, preemptive, mode):
    submit, runtime, bid, nodes = inst
    rec, pol = dlgm(mode, submit, runtime, bid, nodes, preemptive)
    ref = dlgm_reference([Fraction(x) for x in submit], [Fraction(x) for x in runtime], [Fraction(x) for x in bid],
                         nodes, preemptive)
    # the schedule: every time is exact in floating point here
    assert pol.node.tolist() == ref["node"]
    assert [Fraction(x) for x in rec.end_time.tolist()] == ref["end"]
    assert [Fraction(x) for x in pol.tentative_completion.tolist()] == ref["tent_e"]
    # the transfers: what each job paid on arrival and received from the jobs that displaced it
    assert_close(pol.tentative_payment.tolist(), ref["tent_p"], "payment")
    assert_close(pol.received.tolist(), ref["recv"], "compensation")
    net = [p - r for p, r in zip(ref["tent_p"], ref["recv"])]
    for j, (g, x, p) in enumerate(zip(rec.payment.tolist(), net, ref["tent_p"])):
        assert abs(Fraction(g) - x) <= TOL * (p + abs(x)), f"net payment of job {j}: {g!r}, exact {float(x)!r}"
