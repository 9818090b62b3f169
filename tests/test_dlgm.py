"""DLGM and P-DLGM (Stößer 2009, sections 5.3-5.4, Appendix C).

Hand-worked instances (exact), a naive reference (explicit queues and an explicit ledger of
every transfer, written straight from Steps 1-3 of the thesis), and the thesis's properties on
random instances with integer data (so that every sum is exact in floating point):

* Lemma 5 / Theorem 3: under truthful weights, ex-post utility = tentative utility;
* payments are transfers between jobs: they sum to zero;
* Theorem 1/3 (node choice): forcing a job onto any other node does not raise its utility;
* Lemma 4: misreporting the weight (on any node) does not raise the tentative utility;
* Lemma 6: given a truthful weight, arriving later than the release date does not pay.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine.records import FinalState
from marketsched.mechanisms.online.dlgm import DLGM, START_RULES, make_dlgm, ratio_buckets, run_dlgm
from marketsched.workloads import read_swf, scale_capacity, split_parallel, to_workload
from marketsched.workloads.workload import Workload
from reference_dlgm import reference


def workload(submit, runtime, nodes, procs=None):
    return Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=nodes)


# ---------------------------------------------------------------------------- hand-worked
# Two nodes; jobs (release r, run time d, weight v): 0 (0, 4, 1), 1 (0, 2, 3), 2 (1, 3, 3),
# 3 (1, 1, 2), 4 (2, 2, 1). Ratios v/d: 0.25, 1.5, 1, 2, 0.5.
HAND = dict(submit=[0, 0, 1, 1, 2], runtime=[4, 2, 3, 1, 2], bid=[1, 3, 3, 2, 1])


def run_hand(preemptive):
    w = workload(HAND["submit"], HAND["runtime"], 2)
    return run_dlgm(w, HAND["bid"], preemptive, record_offers=True)


def test_dlgm_by_hand():
    rec, pol = run_hand(False)
    # t=0: jobs 0 and 1 find idle nodes 0 and 1 (cost 0; lowest index first).
    # t=1: job 2 (ratio 1): node 0 runs job 0 (3 s left): e^ = 1+3+3 = 7, cost 3*7 = 21;
    #      node 1 runs job 1 (1 s left): e^ = 1+1+3 = 5, cost 15 -> node 1, queue [2].
    assert pol.offers_completion[2].tolist() == [7, 5]
    assert pol.offers_payment[2].tolist() == [0, 0]
    # t=1: job 3 (ratio 2): node 0: e^ = 1+3+1 = 5, cost 2*5 = 10; node 1: displaces job 2:
    #      e^ = 1+1+1 = 3, p^ = 1*3 = 3, cost 2*3+3 = 9 -> node 1, queue [3, 2].
    assert pol.offers_completion[3].tolist() == [5, 3]
    assert pol.offers_payment[3].tolist() == [0, 3]
    # t=2: job 1 ends, job 3 starts (1 s). Job 4 (ratio 0.5): node 0: e^ = 2+2+2 = 6, cost 6;
    #      node 1: job 3 (1 s) and job 2 (ratio 1, 3 s) ahead: e^ = 2+1+3+2 = 8 -> node 0.
    assert pol.offers_completion[4].tolist() == [6, 8]
    assert pol.node.tolist() == [0, 1, 1, 1, 0]
    # Schedule: node 0: job 0 [0,4), job 4 [4,6); node 1: job 1 [0,2), job 3 [2,3), job 2 [3,6).
    assert rec.first_start.tolist() == [0, 0, 3, 2, 4]
    assert rec.end_time.tolist() == [4, 2, 6, 3, 6]
    assert pol.tentative_completion.tolist() == [4, 2, 5, 3, 6]
    # Job 3 paid 3 to job 2, which was delayed by 1 s at weight 3.
    assert pol.tentative_payment.tolist() == [0, 0, 0, 3, 0]
    assert pol.received.tolist() == [0, 0, 3, 0, 0]
    assert rec.payment.tolist() == [0, 0, -3, 3, 0]
    assert rec.preemptions.tolist() == [0] * 5
    # total weighted flow time 1*4 + 3*2 + 3*5 + 2*2 + 1*4 = 33
    assert float(np.dot(HAND["bid"], rec.end_time - np.array(HAND["submit"]))) == 33


def test_pdlgm_by_hand():
    rec, pol = run_hand(True)
    # t=1: job 2 (ratio 1): node 0 runs job 0 with ratio 1/3 < 1: displaced: e^ = 1+3 = 4,
    #      p^ = 3*1 = 3, cost 3*4+3 = 15; node 1 runs job 1 with ratio 3/1 >= 1: e^ = 1+1+3 = 5,
    #      cost 15. A tie: the lower node index, node 0: job 2 preempts job 0 and pays it 3.
    assert pol.offers_completion[2].tolist() == [4, 5]
    assert pol.offers_payment[2].tolist() == [3, 0]
    # t=1: job 3 (ratio 2): node 0: job 2 (ratio 1) and job 0 (1/3) displaced: e^ = 2, p^ = 1*(3+1),
    #      cost 8; node 1: job 1 (ratio 3) ahead: e^ = 1+1+1 = 3, cost 6 -> node 1.
    assert pol.offers_completion[3].tolist() == [2, 3]
    assert pol.offers_payment[3].tolist() == [4, 0]
    # t=2: job 3 starts on node 1. Job 4 (ratio 0.5): node 0: job 2 (2 s left, ratio 1.5) ahead,
    #      job 0 (1/3) behind: e^ = 2+2+2 = 6, p^ = 2*1, cost 8; node 1: job 3 ahead: e^ = 5, cost 5.
    assert pol.offers_completion[4].tolist() == [6, 5]
    assert pol.offers_payment[4].tolist() == [2, 0]
    assert pol.node.tolist() == [0, 1, 0, 1, 1]
    # Node 0: job 0 [0,1), job 2 [1,4), job 0 again [4,7). Node 1: job 1 [0,2), job 3 [2,3), job 4 [3,5).
    assert rec.preemptions.tolist() == [1, 0, 0, 0, 0]
    assert rec.first_start.tolist() == [0, 0, 1, 2, 3]
    assert rec.end_time.tolist() == [7, 2, 4, 3, 5]
    assert pol.tentative_completion.tolist() == [4, 2, 4, 3, 5]
    assert pol.tentative_payment.tolist() == [0, 0, 3, 0, 0]
    assert pol.received.tolist() == [3, 0, 0, 0, 0]  # job 0: delayed 3 s at weight 1
    assert rec.payment.tolist() == [-3, 0, 3, 0, 0]
    # total weighted flow time 7 + 6 + 9 + 4 + 3 = 29 < DLGM's 33
    assert float(np.dot(HAND["bid"], rec.end_time - np.array(HAND["submit"]))) == 29


def test_split_copies_see_each_other():
    # Two nodes. Job A (2 wide, 10 s, weight 1) at t=0; job B (2 wide, 4 s, weight 5) and job C
    # (serial, 4 s, weight 5: the same ratio as B's copies) at t=1. After splitting: rows 0-1 = A,
    # rows 2-3 = B, row 4 = C. Copies and equal-ratio jobs see the earlier ones ahead.
    w = split_parallel(workload([0, 1, 1], [10, 4, 4], 2, procs=[2, 2, 1]))
    rec, pol = run_dlgm(w, [1, 1, 5, 5, 5], False, record_offers=True)
    # row 2: both nodes e^ = 1+9+4 = 14 -> node 0; row 3: node 0 has row 2 ahead (18) -> node 1;
    # row 4: both nodes 18 -> node 0.
    assert pol.offers_completion[3].tolist() == [18, 14]
    assert pol.offers_completion[4].tolist() == [18, 18]
    assert pol.node.tolist() == [0, 1, 0, 1, 0]
    assert pol.tentative_completion.tolist() == [10, 10, 14, 14, 18]
    assert rec.end_time.tolist() == [10, 10, 14, 14, 18]
    # the same without recording offers (the reuse of an identical predecessor's offers)
    rec2, pol2 = run_dlgm(w, [1, 1, 5, 5, 5], False)
    assert pol2.node.tolist() == [0, 1, 0, 1, 0]
    assert rec2.end_time.tolist() == [10, 10, 14, 14, 18]


def test_node_choice_by_true_weight_differs_from_choice_by_report():
    # Two nodes, all jobs at t=0 (weights x10 to keep the numbers whole). Job 0 (5 s, weight 10)
    # takes node 0, job 1 (1 s, weight 10) node 1; job 2 (10 s, weight 20, ratio 2) queues on
    # node 1 (cost 20 x 1 < 20 x 5). Job 3 (1 s, true weight 3) reports weight 30: on node 1 it
    # goes ahead of job 2: e^ = 0+1+1 = 2, p^ = 1 x 20 = 20; on node 0: e^ = 0+5+1 = 6, p^ = 0.
    # By its true weight, node 0 costs 3 x 5 = 15 < 3 x 1 + 20 = 23: node 0 (the myopic best
    # response, Stößer (2009) Theorem 1); by its report, 30 x 5 = 150 > 30 + 20 = 50: node 1.
    w = workload([0, 0, 0, 0], [5, 1, 10, 1], 2)
    true = np.array([10.0, 10, 20, 3])
    lie = np.array([10.0, 10, 20, 30])
    _, by_true = run_dlgm(w, lie, true_value=true)
    _, by_report = run_dlgm(w, lie, true_value=true, node_choice="report")
    assert by_true.node.tolist() == [0, 1, 1, 0]
    assert by_report.node.tolist() == [0, 1, 1, 1]
    assert by_true.tentative_utility(true)[3] == -3 * 6  # = truthful: job 3 with weight 3 also picks node 0
    assert by_report.tentative_utility(true)[3] == -3 * 2 - 20
    _, truthful = run_dlgm(w, true)
    assert truthful.node.tolist() == [0, 1, 1, 0] and truthful.tentative_utility(true)[3] == -18
    # without true weights the reports are taken as true: both choices coincide
    _, plain = run_dlgm(w, lie)
    assert plain.node.tolist() == by_report.node.tolist()


def test_pdlgm_job_displaced_before_it_ran_has_no_start_and_no_preemption():
    # One node. At t=0 job 0 (4 s, weight 1) reaches the idle node, then job 1 (1 s, weight 2,
    # ratio 2 > 1/4) arrives at the same time and displaces it: job 0 never ran, so it neither
    # started at 0 nor was preempted. It starts at 1 (paid 1 x 1 for the delay). At t=2 job 2
    # (1 s, weight 8) displaces it again after 1 s of progress: that is a preemption.
    w = workload([0, 0, 2], [4, 1, 1], 1)
    for rule in START_RULES:
        rec, pol = run_dlgm(w, [1, 2, 8], True, start_rule=rule)
        assert rec.first_start.tolist() == [1, 0, 2]
        assert rec.end_time.tolist() == [6, 1, 3]
        assert rec.preemptions.tolist() == [1, 0, 0]
        assert pol.preemption_count == 1
        assert pol.received.tolist() == [1 + 1, 0, 0]  # delayed 1 s by job 1 and 1 s by job 2


def test_idle_node_tie_after_a_queue_empties():
    # Two nodes, one ratio bucket (so the work of node 0's queue sits in one float cell). Jobs 2
    # (0.1 s) and 3 (0.2 s) wait on node 0 behind job 0 and leave: a plain float cell would keep
    # 0.1 + 0.2 - 0.1 - 0.2 = 5.6e-17 (the cells are compensated and reset when empty). At t=3 both nodes are idle and job 4 (the lowest ratio: the whole
    # bucket is "ahead") sees the same offer on both: the tie goes to node 0.
    w = workload([0, 0, 0.5, 0.5, 3], [1, 2, 0.1, 0.2, 100], 2)
    rec, pol = run_dlgm(w, [1, 1, 1, 1, 1], max_buckets=1, record_offers=True)
    assert pol.node.tolist()[:4] == [0, 1, 0, 0]
    assert pol.offers_completion[4].tolist() == [103, 103]
    assert pol.node[4] == 0


def test_same_time_arrivals_two_rules():
    # One node; job 0 (4 s, weight 1) and job 1 (1 s, weight 2) both arrive at t=0.
    w = workload([0, 0], [4, 1], 1)
    # "immediate" (the default; the reading of Appendix C): job 0 reaches the idle node first
    # and starts; DLGM never displaces a running job, so job 1 waits: e^ = 0+4+1 = 5, pays 0.
    rec, pol = run_dlgm(w, [1, 2])
    assert rec.first_start.tolist() == [0, 4] and pol.tentative_completion.tolist() == [4, 5]
    assert rec.payment.tolist() == [0, 0]
    # "after-arrivals": both wait in the idle node's queue before it starts; job 1 (ratio 2)
    # goes ahead of job 0 (1/4) and pays it 1 x 1; the node then starts job 1.
    rec, pol = run_dlgm(w, [1, 2], start_rule="after-arrivals")
    assert rec.first_start.tolist() == [1, 0] and pol.tentative_completion.tolist() == [4, 1]
    assert rec.end_time.tolist() == [5, 1]
    assert rec.payment.tolist() == [-1, 1]
    # P-DLGM: the same schedule under both rules (a job displaced before it ran is a waiting job)
    for rule in START_RULES:
        rec, _ = run_dlgm(w, [1, 2], True, start_rule=rule)
        assert rec.first_start.tolist() == [1, 0] and rec.preemptions.tolist() == [0, 0]


@pytest.mark.parametrize("preemptive", [False, True])
@pytest.mark.parametrize("rule", START_RULES)
def test_zero_run_time_job_completes_on_the_spot(preemptive, rule):
    # One node, all at t=0: A (run 0), B (run 3), C (run 0). A zero-length job completes at its
    # arrival and never holds its node, so the order of the batch does not matter: B starts at 0
    # and C ends at 0 whether A came first or not (before the rule, [B, C] alone made C wait 3).
    rec, pol = run_dlgm(workload([0, 0, 0], [0, 3, 0], 1), [1, 1, 1], preemptive, start_rule=rule)
    assert rec.first_start.tolist() == [0, 0, 0] and rec.end_time.tolist() == [0, 3, 0]
    assert pol.tentative_completion.tolist() == [0, 3, 0] and rec.payment.tolist() == [0, 0, 0]
    rec, pol = run_dlgm(workload([0, 0], [3, 0], 1), [1, 1], preemptive, start_rule=rule)
    assert rec.first_start.tolist() == [0, 0] and rec.end_time.tolist() == [3, 0]
    assert pol.tentative_completion.tolist() == [3, 0] and rec.payment.tolist() == [0, 0]
    assert (rec.state == FinalState.COMPLETED).all()


def test_zero_run_time_job_preempts_nothing():
    # P-DLGM, one node: job 0 (4 s, weight 1) runs from 0; job 1 (0 s, weight 5: ratio +inf)
    # arrives at 1. It takes no time: it ends at 1, pays nothing, and job 0 is not preempted.
    rec, pol = run_dlgm(workload([0, 1], [4, 0], 1), [1, 5], True)
    assert rec.end_time.tolist() == [4, 1] and rec.first_start.tolist() == [0, 1]
    assert rec.preemptions.tolist() == [0, 0] and pol.preemption_count == 0
    assert rec.payment.tolist() == [0, 0] and pol.node.tolist() == [0, 0]


@settings(max_examples=100, deadline=None)
@given(st.data(), st.booleans(), st.sampled_from(START_RULES))
def test_zero_run_time_jobs_change_nothing_for_the_others(data, preemptive, rule):
    # Zero-length jobs put anywhere among the arrivals (before, between or after jobs of the same
    # time) leave every other job's records exactly as without them, and end at their release.
    n = data.draw(st.integers(1, 10))
    m = data.draw(st.integers(1, 3))
    submit = sorted(data.draw(st.lists(st.integers(0, 10), min_size=n, max_size=n)))
    runtime = data.draw(st.lists(st.integers(1, 6), min_size=n, max_size=n))
    weight = data.draw(st.lists(st.integers(1, 9), min_size=n, max_size=n))
    zeros = data.draw(st.lists(st.tuples(st.integers(0, 11), st.integers(-1, 10 * n), st.integers(0, 9)), max_size=6))
    # the jobs in submit order, ties by a key: the others keep their order (keys 0, 10, 20, ...)
    rows = [(t, 10 * i, d, v) for i, (t, d, v) in enumerate(zip(submit, runtime, weight))]
    rows += [(t, key, 0, v) for t, key, v in zeros]
    rows.sort(key=lambda r: (r[0], r[1]))
    alone, alone_pol = run_dlgm(workload(submit, runtime, m), weight, preemptive, start_rule=rule)
    mixed, mixed_pol = run_dlgm(workload([r[0] for r in rows], [r[2] for r in rows], m), [r[3] for r in rows],
                                preemptive, start_rule=rule)
    others = np.array([r[2] > 0 for r in rows])
    for name in ("first_start", "end_time", "preemptions", "payment", "state"):
        np.testing.assert_array_equal(getattr(mixed, name)[others], getattr(alone, name), err_msg=name)
    for name in ("node", "tentative_completion", "tentative_payment", "received"):
        np.testing.assert_array_equal(getattr(mixed_pol, name)[others], getattr(alone_pol, name), err_msg=name)
    zero_submit = np.array([r[0] for r in rows], dtype=float)[~others]
    assert mixed.end_time[~others].tolist() == zero_submit.tolist() == mixed.first_start[~others].tolist()
    assert (mixed.payment[~others] == 0).all() and (mixed.state == FinalState.COMPLETED).all()


# ---------------------------------------------------------------------------- random instances
@st.composite
def instances(draw, max_jobs=12, min_nodes=1, horizon=15):
    n = draw(st.integers(1, max_jobs))
    m = draw(st.integers(min_nodes, 3))
    submit = sorted(draw(st.lists(st.integers(0, horizon), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    procs = draw(st.lists(st.sampled_from([1, 1, 1, 2, 3]), min_size=n, max_size=n))
    procs = [min(p, m) for p in procs]
    weight = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    w = split_parallel(workload(submit, runtime, m, procs=procs))
    weights = np.asarray(weight, dtype=np.float64)[w.meta["parent"]]  # copies share the weight
    preemptive = draw(st.booleans())
    buckets = draw(st.sampled_from([1, 2, 4, None]))
    return w, weights, preemptive, buckets


def utility(true_value, records):
    """Ex-post utility u_j = -v_j e_j - p_j (section 5.2: completion time, net payment)."""
    return -true_value * records.end_time - records.payment


def same_as_reference(rec, pol, ref):
    assert pol.node.tolist() == ref["node"]
    assert pol.tentative_completion.tolist() == ref["tent_e"]
    assert pol.tentative_payment.tolist() == ref["tent_p"]
    assert rec.end_time.tolist() == ref["end"]
    assert pol.received.tolist() == ref["recv"]
    np.testing.assert_array_equal(rec.first_start, ref["start"])
    assert rec.preemptions.tolist() == ref["preempt"]


@settings(max_examples=150, deadline=None)
@given(instances(), st.sampled_from(START_RULES))
def test_matches_naive_reference(inst, rule):
    w, v, pre, buckets = inst
    rec, pol = run_dlgm(w, v, pre, max_buckets=buckets, start_rule=rule)
    ref = reference(w.submit_time.tolist(), w.runtime.tolist(), v.tolist(), w.capacity, pre, start_rule=rule)
    same_as_reference(rec, pol, ref)


@settings(max_examples=120, deadline=None)
@given(instances(), st.sampled_from(START_RULES), st.data())
def test_cancellations_match_naive_reference(inst, rule, data):
    """The live market's cancellation replayed in the simulator (``cancel``): a waiting job
    leaves its queue at its time, keeps what it received, and the rest of the schedule and every
    payment are the reference's; a cancellation of a job that is not waiting then is skipped
    (times are whole numbers, so cancellations share times with arrivals and completions)."""
    w, v, pre, buckets = inst
    rows = data.draw(st.lists(st.integers(0, len(w) - 1), max_size=4, unique=True))
    cancel = {j: (float(data.draw(st.integers(0, 20))), data.draw(st.integers(0, len(w)))) for j in rows}
    rec, pol = run_dlgm(w, v, pre, max_buckets=buckets, start_rule=rule, cancel=cancel)
    ref = reference(w.submit_time.tolist(), w.runtime.tolist(), v.tolist(), w.capacity, pre, start_rule=rule,
                    cancel=cancel)
    same_as_reference(rec, pol, ref)
    assert sorted(pol.cancel_skipped) == sorted(ref["skipped"])
    done = set(rows) - set(ref["skipped"])
    assert {j for j in range(len(w)) if rec.state[j] == FinalState.KILLED} == done
    assert abs(rec.payment.sum()) < 1e-9 * max(1.0, float(np.abs(rec.payment).sum()))  # transfers only


def test_cancelling_a_waiting_job_by_hand():
    """One node: A (weight 1, 4 s) runs from 0; B (1, 4) queues at 0; C (3, 2) at 1 overtakes B
    and pays it 1 * 2. B is cancelled at 2: it leaves with the 2 it received, C keeps what it
    paid, and the node runs C from 4 to 6 and then nothing (B never starts)."""
    w = workload([0, 0, 1], [4, 4, 2], 1)
    rec, pol = run_dlgm(w, [1.0, 1.0, 3.0], False, cancel={1: (2.0, 3)})
    assert rec.end_time.tolist() == [4.0, 2.0, 6.0] and math.isnan(rec.first_start[1])
    assert rec.state.tolist() == [FinalState.COMPLETED, FinalState.KILLED, FinalState.COMPLETED]
    assert rec.payment.tolist() == [0.0, -2.0, 2.0] and pol.cancel_skipped == []
    rec, pol = run_dlgm(w, [1.0, 1.0, 3.0], False, cancel={0: (2.0, 3), 2: (1.0, 2)})  # running; not yet arrived
    assert pol.cancel_skipped == [2, 0] and rec.end_time.tolist() == [4.0, 10.0, 6.0]


@settings(max_examples=100, deadline=None)
@given(instances(), st.sampled_from(START_RULES), st.sampled_from(["true", "report"]), st.data())
def test_matches_naive_reference_with_misreports(inst, rule, choice, data):
    w, v, pre, buckets = inst
    lie = v.copy()
    liars = data.draw(st.lists(st.integers(0, len(w) - 1), max_size=3))
    for j in liars:
        lie[j] = data.draw(st.integers(0, 40))
    rec, pol = run_dlgm(w, lie, pre, max_buckets=buckets, true_value=v, node_choice=choice, start_rule=rule)
    ref = reference(w.submit_time.tolist(), w.runtime.tolist(), lie.tolist(), w.capacity, pre,
                    choice=(v if choice == "true" else lie).tolist(), start_rule=rule)
    same_as_reference(rec, pol, ref)


@settings(max_examples=60, deadline=None)
@given(instances())
def test_pdlgm_start_rules_agree(inst):
    # Under P-DLGM a job that an arrival at the same time displaces before it ran is just a
    # waiting job, so both readings of simultaneous arrivals give one schedule and one ledger.
    w, v, _, buckets = inst
    a, pa = run_dlgm(w, v, True, max_buckets=buckets)
    b, pb = run_dlgm(w, v, True, max_buckets=buckets, start_rule="after-arrivals")
    assert a.equals(b)
    assert pa.node.tolist() == pb.node.tolist()


@settings(max_examples=150, deadline=None)
@given(instances())
def test_truthful_ex_post_equals_tentative_and_budget_balance(inst):
    w, v, pre, buckets = inst
    rec, pol = run_dlgm(w, v, pre, max_buckets=buckets)
    assert (rec.state == FinalState.COMPLETED).all()
    np.testing.assert_array_equal(utility(v, rec), pol.tentative_utility(v))
    assert rec.payment.sum() == 0  # integer data: exact
    assert (rec.end_time >= pol.tentative_completion).all()  # later jobs only delay (section 5.3)
    assert (rec.payment <= pol.tentative_payment).all()
    if not pre:
        assert rec.preemptions.sum() == 0


@settings(max_examples=100, deadline=None)
@given(instances(max_jobs=10, min_nodes=2, horizon=4), st.data())  # crowded: queues on every node
def test_no_gain_from_another_node(inst, data):
    w, v, pre, buckets = inst
    rec, _ = run_dlgm(w, v, pre, max_buckets=buckets)
    j = data.draw(st.integers(len(w) // 2, len(w) - 1))  # later jobs: the nodes are busy
    best = utility(v, rec)[j]
    for n in range(w.capacity):
        forced, _ = run_dlgm(w, v, pre, max_buckets=buckets, force_node={j: n})
        assert utility(v, forced)[j] <= best


@settings(max_examples=60, deadline=None)
@given(instances(max_jobs=10, horizon=6), st.data())
def test_misreported_weight_does_not_raise_tentative_utility(inst, data):
    # Lemma 4 (Theorem 6 of Heydenreich et al.): whatever weight j reports and whichever node it
    # then joins, its tentative utility (valued at the true weight) is at most the truthful one.
    # The misreporter's default node is its best response under its true weight: the best of
    # all nodes it could have joined with that report.
    w, v, pre, buckets = inst
    _, pol = run_dlgm(w, v, pre, max_buckets=buckets)
    j = data.draw(st.integers(0, len(w) - 1))
    truthful = pol.tentative_utility(v)[j]
    lie = v.copy()
    lie[j] = data.draw(st.integers(0, 40))
    forced = []
    for n in range(w.capacity):
        _, p = run_dlgm(w, lie, pre, max_buckets=buckets, force_node={j: n})
        forced.append(p.tentative_utility(v)[j])
        assert forced[-1] <= truthful
    _, best = run_dlgm(w, lie, pre, max_buckets=buckets, true_value=v)
    assert best.tentative_utility(v)[j] == max(forced)
    assert forced[best.node[j]] == max(forced) and best.node[j] == forced.index(max(forced))


@settings(max_examples=60, deadline=None)
@given(instances(max_jobs=10, horizon=6), st.data())
def test_late_arrival_does_not_pay(inst, data):
    # Lemma 6 (Theorem 8 of Heydenreich et al.): with a truthful weight, reporting a release date
    # later than the true one does not raise the ex-post utility -v e - p.
    w, v, pre, buckets = inst
    rec, _ = run_dlgm(w, v, pre, max_buckets=buckets)
    j = data.draw(st.integers(0, len(w) - 1))
    delay = data.draw(st.integers(1, 10))
    submit = w.submit_time.copy()
    submit[j] += delay
    order = np.argsort(submit, kind="stable")  # the late job is numbered by its new arrival
    late = Workload.from_columns(submit_time=submit[order], runtime=w.runtime[order], capacity=w.capacity)
    rec2, _ = run_dlgm(late, v[order], pre, max_buckets=buckets)
    row = int(np.flatnonzero(order == j)[0])
    assert -v[j] * rec2.end_time[row] - rec2.payment[row] <= utility(v, rec)[j]


@settings(max_examples=50, deadline=None)
@given(instances(), st.integers(0, 12))
def test_cut_run_settles_every_credit(inst, until):
    # A run cut at `until` kills what is still queued or running; the compensations those jobs
    # earned so far are booked at the cut, so payments still sum to zero.
    from marketsched.engine.simulator import Simulator

    w, v, pre, buckets = inst
    rec = Simulator(w, make_dlgm(w, v, pre, max_buckets=buckets)).run(until=until)
    assert rec.payment.sum() == 0
    assert sum(rec.counts().values()) == len(w)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=300), st.integers(1, 20))
def test_ratio_buckets_are_contiguous_ranges(ratios, max_buckets):
    r = np.array(ratios + [math.inf])
    lo, b = ratio_buckets(r, max_buckets)
    assert len(lo) <= max(max_buckets, 1)
    assert (np.diff(lo) < 0).all()  # decreasing lower bounds
    assert (r >= lo[b]).all()  # each ratio is at least its bucket's lower bound
    above = b > 0
    assert (r[above] < lo[b[above] - 1]).all()  # and below the next bucket's


def test_float_weights_on_lpc_slice(trace_path):
    # Real data with bimodal real-valued weights, squeezed onto 10% of the nodes so that queues
    # form: the mechanism agrees with the naive reference and the properties hold up to rounding.
    from marketsched.scenario import true_values

    w, _ = to_workload(read_swf(trace_path("LPC-EGEE-2004-1.2-cln")))
    w = scale_capacity(w.take(np.arange(50_000, 52_000)), 0.1)  # a busy stretch; 14 nodes
    v = true_values(w, "bimodal", seed=5)
    for pre in (False, True):
        rec, pol = run_dlgm(w, v, pre)
        ref = reference(w.submit_time.tolist(), w.runtime.tolist(), v.tolist(), w.capacity, pre)
        assert pol.node.tolist() == ref["node"]
        np.testing.assert_array_equal(rec.end_time, ref["end"])
        np.testing.assert_allclose(pol.tentative_payment, ref["tent_p"], rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(pol.received, ref["recv"], rtol=1e-9, atol=1e-6)
        assert (rec.state == FinalState.COMPLETED).all()
        assert (pol.tentative_payment > 0).sum() > 100  # queues did form
        assert (rec.preemptions.sum() > 0) == pre
        u, tent = utility(v, rec), pol.tentative_utility(v)
        np.testing.assert_allclose(u, tent, rtol=1e-12, atol=1e-6)
        assert abs(rec.payment.sum()) <= 1e-9 * pol.tentative_payment.sum()


# ---------------------------------------------------------------------------- bad input
def test_bad_input_is_named():
    w = workload([0, 1], [3, 2], 2)
    with pytest.raises(ValueError, match="job row 1"):
        make_dlgm(w, [1.0, -2.0])
    with pytest.raises(ValueError, match="one bid per job"):
        make_dlgm(w, [1.0])
    wide = workload([0, 1], [3, 2], 2, procs=[1, 2])
    with pytest.raises(ValueError, match="serial jobs; job row 1"):
        run_dlgm(wide, [1.0, 1.0])
    with pytest.raises(ValueError, match="force_node"):
        run_dlgm(w, [1.0, 1.0], force_node={0: 5})
    with pytest.raises(ValueError, match="true weight of job row 0"):
        make_dlgm(w, [1.0, 1.0], true_value=[math.nan, 1.0])
    with pytest.raises(ValueError, match="node_choice"):
        make_dlgm(w, [1.0, 1.0], node_choice="best")
    with pytest.raises(ValueError, match="start_rule"):
        make_dlgm(w, [1.0, 1.0], start_rule="later")
    from marketsched.engine.simulator import Simulator

    with pytest.raises(ValueError, match="differs from the workload"):
        Simulator(w, DLGM([1.0, 1.0], [3.0, 9.0])).run()


def test_exact_optimum_of_small_instances():
    """The brute force behind the competitive-ratio check: Smith's rule on one node with common
    release 0; a hand instance with a release date; never above DLGM's schedule."""
    from marketsched.experiments.stoesser_ch5 import competitive_instances, exact_optimum

    rng = np.random.default_rng(3)
    for _ in range(20):
        d = rng.integers(1, 9, 5).astype(float)
        v = rng.integers(1, 9, 5).astype(float)
        order = np.argsort(-v / d, kind="stable")  # WSPT is optimal for 1 || sum w_j C_j
        assert exact_optimum(np.zeros(5), d, v, 1) == pytest.approx(float((v[order] * np.cumsum(d[order])).sum()))
    # two jobs, one node: job 0 (r=0, d=4, v=1), job 1 (r=1, d=1, v=10): waiting for job 1 pays
    assert exact_optimum([0, 1], [4, 1], [1, 10], 1) == pytest.approx(min(1 * 4 + 10 * 5, 10 * 2 + 1 * 6))
    # two nodes: everything starts at release
    r, d, v = np.array([0.0, 2, 3]), np.array([3.0, 1, 2]), np.array([1.0, 2, 3])
    brute = min(sum(vv * e for vv, e in zip(v, ends)) for ends in [r + d])
    assert exact_optimum(r, d, v, 3) == pytest.approx(brute)
    comp = competitive_instances(15)
    assert (comp.dlgm >= comp.optimum - 1e-9).all()
    # P-DLGM and the non-preemptive optimum are preemptive schedules too
    assert (comp.pmtn_lower <= np.minimum(comp.pdlgm, comp.optimum) + 1e-9).all()


def _grid_preemptive_optimum(r, d, v, nodes):
    """min sum v_j e_j over preemptive schedules that switch jobs only at whole times (every unit
    slot runs at most ``nodes`` released, unfinished jobs): exhaustive, for a few small jobs. A
    feasible preemptive schedule, so at least the true preemptive optimum."""
    import functools
    import itertools

    n = len(r)

    @functools.cache
    def best(t, left):
        if not any(left):
            return 0.0
        ready = [j for j in range(n) if left[j] > 0 and r[j] <= t]
        options = [c for k in range(1, min(nodes, len(ready)) + 1) for c in itertools.combinations(ready, k)] or [()]
        out = np.inf
        for run in options:
            rest = list(left)
            cost = 0.0
            for j in run:
                rest[j] -= 1
                if rest[j] == 0:
                    cost += v[j] * (t + 1)
            out = min(out, cost + best(t + 1, tuple(rest)))
        return out

    return best(0, tuple(int(x) for x in d))


def test_preemptive_lower_bound_of_small_instances():
    """Theorem 4's benchmark: the linear program's bound never exceeds a preemptive schedule
    (an exhaustive search on whole time units, P-DLGM's own, the non-preemptive optimum), and is
    exact or close on hand instances."""
    from marketsched.experiments.stoesser_ch5 import exact_optimum, preemptive_lower_bound

    # one job: it ends at r + d
    assert preemptive_lower_bound([3], [4], [2], 1) == pytest.approx(14)
    # one node, a long job preempted by a short heavy one: A 0-1, B 1-2, A 2-11 = 100 * 2 + 11 = 211,
    # one less than the best non-preemptive schedule (B waits for A or A waits for B: 212)
    r, d, v = [0, 1], [10, 1], [1, 100]
    assert _grid_preemptive_optimum(r, d, v, 1) == 211 and exact_optimum(r, d, v, 1) == 212
    assert 210 < preemptive_lower_bound(r, d, v, 1) <= 211
    rng = np.random.default_rng(11)
    for _ in range(40):
        n, nodes = int(rng.integers(2, 5)), int(rng.integers(1, 3))
        r = np.sort(rng.integers(0, 4, n)).astype(float)
        d = rng.integers(1, 4, n).astype(float)
        v = rng.integers(0, 6, n).astype(float)
        lb = preemptive_lower_bound(r, d, v, nodes)
        assert lb <= _grid_preemptive_optimum(r, d, v, nodes) + 1e-9
        assert lb <= exact_optimum(r, d, v, nodes) + 1e-9
        assert lb >= float((v * (r + d)).sum()) - 1e-9  # never below every job ending at r + d
    # a run time shorter than a slot: the job still ends at r + d (a bound that placed its work at
    # the slot's middle would say 0.175)
    assert preemptive_lower_bound([0], [0.1], [1], 1) == pytest.approx(0.1)
    # quarter-unit data (the slot): against the exhaustive search in quarter units, times scaled back
    for _ in range(20):
        n, nodes = int(rng.integers(2, 4)), int(rng.integers(1, 3))
        r4 = np.sort(rng.integers(0, 6, n))
        d4 = rng.integers(1, 5, n)
        v = rng.integers(0, 6, n).astype(float)
        lb = preemptive_lower_bound(r4 / 4, d4 / 4, v, nodes)
        assert lb <= _grid_preemptive_optimum(r4, d4, v, nodes) / 4 + 1e-9
    with pytest.raises(ValueError, match="run times must be positive"):
        preemptive_lower_bound([0, 1], [2, 0], [1, 1], 1)
    with pytest.raises(ValueError, match="not a multiple of the slot"):
        preemptive_lower_bound([0, 0.1], [1, 0.1], [1, 10], 1)  # its bound would be 4, the optimum 3.1
