"""FCFS and EASY backfilling: hand-made cases, the plain textbook reference of
``reference_easy.py`` on random instances and on full traces, and the reservation guarantee."""

import math

import numpy as np
import pytest
from hypothesis import given, settings

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.backfilling import Backfilling, easy, fcfs
from marketsched.workloads import read_swf, to_workload
from marketsched.workloads.workload import Workload
from reference_easy import parallel_instances
from reference_easy import simulate as reference


def run(policy, submit, runtime, procs, capacity, estimate=None):
    w = Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, runtime_estimate=estimate,
                              capacity=capacity)
    return Simulator(w, policy).run()


# 4 processors. Job 0 takes 3 procs for 10 s. Job 1 (head, 4 procs) must wait for it: shadow 10.
# Job 2 (1 proc, 5 s) fits in the idle processor and ends before 10: EASY backfills it.
# Job 3 (1 proc, 20 s) would end after the shadow and there are no extra processors: it waits.
CASE = dict(submit=[0, 1, 2, 3], runtime=[10, 5, 5, 20], procs=[3, 4, 1, 1], capacity=4)


def test_fcfs_by_hand():
    r = run(fcfs(), **CASE, estimate=CASE["runtime"])
    assert r.first_start.tolist() == [0, 10, 15, 15]


def test_easy_by_hand():
    r = run(easy(), **CASE, estimate=CASE["runtime"])
    assert r.first_start.tolist() == [0, 10, 2, 15]
    assert r.end_time.tolist() == [10, 15, 7, 35]


def test_easy_uses_extra_processors():
    # 4 procs; job 0 uses 2 for 10 s; head job 1 needs 3 -> shadow 10, extra = 4 - 3 = 1.
    # Job 2 (1 proc, 100 s) ends after the shadow but fits in the extra processor: backfilled.
    # Job 3 (1 proc, 100 s) then finds no extra processor left and waits.
    r = run(easy(), submit=[0, 1, 2, 3], runtime=[10, 5, 100, 100], procs=[2, 3, 1, 1], capacity=4,
            estimate=[10, 5, 100, 100])
    assert r.first_start.tolist() == [0, 10, 2, 15]


def test_easy_plans_with_estimates_not_runtimes():
    # Job 0 is estimated at 100 s but ends at 10. Job 2's estimate (50) is below the shadow (100),
    # so it is backfilled at t=2 although it then really runs past the head's actual start.
    r = run(easy(), submit=[0, 1, 2], runtime=[10, 5, 50], procs=[3, 4, 1], capacity=4, estimate=[100, 5, 50])
    assert r.first_start.tolist() == [0, 52, 2]


def test_missing_estimates_fall_back_to_runtime():
    policy = easy()
    run(policy, **CASE)  # no estimates at all
    assert policy.fallback_estimates == 4


def test_easy_counts_every_running_job_that_ends_by_the_shadow_time():
    # 5 processors. At t=0 jobs 0 and 1 (1 processor, 10 s each) and job 2 (2 processors, 20 s)
    # start: 1 processor free. At t=1 the head, job 3, needs 2: walking the estimated ends, job 0
    # (end 10) makes it fit, so the shadow time is 10. Job 1 also ends at 10, so at the shadow
    # time 1 + 1 + 1 = 3 processors are free and the extra processors are 3 - 2 = 1 (stopping
    # the count at job 0 would give 0). Job 4 (1 processor, 100 s) arrives at t=2: it fits in
    # the free processor and uses no more than the extra one, so it is backfilled at once.
    # At t=10 jobs 0 and 1 end: 5 - 2 - 1 = 2 free, and the head starts as reserved.
    r = run(easy(), submit=[0, 0, 0, 1, 2], runtime=[10, 10, 20, 5, 100], procs=[1, 1, 2, 2, 1], capacity=5,
            estimate=[10, 10, 20, 5, 100])
    assert r.first_start.tolist() == [0, 0, 0, 10, 2]


def test_easy_reconsiders_old_queued_jobs_after_an_arrival():
    # 4 processors; estimates too short (the jobs overrun them). t=0: job 0 (2 processors,
    # estimate 5, runs 20) and job 1 (1 processor, estimate 8, runs 30) start: 1 free.
    # t=1: head job 2 needs 3: shadow 5 (job 0's estimated end); job 1 ends after it, so no extra
    # processors; job 3 (1 processor, 100 s) would end after the shadow time: it waits.
    # t=9, only an arrival (job 4, 4 processors): both running jobs have overrun and are expected
    # to end now, so the shadow time is 9 and the extra processors are 1 + 2 + 1 - 3 = 1: old
    # job 3 is backfilled now. (Only overruns can make an old queued job backfillable at an
    # event without completions: otherwise the shadow time and the extra processors stay.)
    # t=20 job 0 ends: 2 free < 3. t=30 job 1 ends: the head starts. Job 4 waits for job 3.
    r = run(easy(), submit=[0, 0, 1, 1, 9], runtime=[20, 30, 10, 100, 1], procs=[2, 1, 3, 1, 4], capacity=4,
            estimate=[5, 8, 10, 100, 1])
    assert r.first_start.tolist() == [0, 0, 30, 9, 109]


def test_zero_runtime_jobs_free_their_processors_at_the_next_pass():
    # 3 processors, all jobs at t=0. Job 0 (2 processors) runs 0 s but is estimated at 100 s;
    # it starts in the first pass at t=0. Head job 1 (3 processors) does not fit: shadow 100,
    # extra 1 + 2 - 3 = 0. Job 2 (1 processor, 50 s) ends by the shadow time: backfilled at 0.
    # Job 0 ends at t=0: its processors are free in the next pass, at the same time 0, but job 2
    # now holds one of them, so the head waits for it until t=50.
    r = run(easy(), submit=[0, 0, 0], runtime=[0, 5, 50], procs=[2, 3, 1], capacity=3, estimate=[100, 5, 50])
    assert r.first_start.tolist() == [0, 50, 0]
    assert r.end_time.tolist() == [0, 55, 50]
    # FCFS: the head starts in the second pass at t=0, job 2 after it
    r = run(fcfs(), submit=[0, 0, 0], runtime=[0, 5, 50], procs=[2, 3, 1], capacity=3)
    assert r.first_start.tolist() == [0, 0, 5]


@settings(max_examples=300, deadline=None)
@given(parallel_instances())
def test_matches_plain_textbook_reference(inst):
    submit, runtime, procs, cap, estimate = inst
    for backfill in (False, True):
        r = run(Backfilling(backfill=backfill), submit, runtime, procs, cap, estimate=estimate)
        assert r.first_start.tolist() == reference(submit, runtime, procs, cap, estimate, backfill=backfill)


@pytest.mark.parametrize("trace", ["SDSC-SP2-1998-4.2-cln", "KTH-SP2-1996-2.1-cln"])
def test_matches_plain_textbook_reference_on_full_trace(trace_path, trace):
    w, _ = to_workload(read_swf(trace_path(trace)))
    assert (w.procs > 1).any() and (w.runtime > w.runtime_estimate).any()  # parallel jobs, overruns
    for backfill in (False, True):
        r = Simulator(w, Backfilling(backfill=backfill)).run()
        ref = reference(w.submit_time.tolist(), w.runtime.tolist(), w.procs.tolist(), w.capacity,
                        w.runtime_estimate.tolist(), backfill=backfill)
        assert int((r.first_start != np.array(ref)).sum()) == 0


def test_bad_estimate_is_named():
    with pytest.raises(ValueError, match="job row 1"):
        run(easy(estimate=[1.0, -2.0]), submit=[0, 0], runtime=[1, 1], procs=[1, 1], capacity=1)


class Audited(Backfilling):
    """EASY that records each head job's reservation (its shadow time) when first computed."""

    def bind(self, sim):
        super().bind(sim)
        self.reservation = {}

    def step(self, t, arrived, completed):
        super().step(t, arrived, completed)
        q = self.queue
        if q and q[0] not in self.reservation:
            need, avail = self.sim.procs[q[0]], self.sim.free
            for e, j in self.ends:
                avail += self.sim.procs[j]
                if avail >= need:
                    self.reservation[q[0]] = max(e, t)
                    break


@settings(max_examples=200, deadline=None)
@given(parallel_instances())
def test_backfilling_never_delays_the_head_reservation(inst):
    submit, runtime, procs, cap, _ = inst
    policy = Audited(backfill=True)
    r = run(policy, submit, runtime, procs, cap, estimate=runtime)  # exact estimates
    for j, reserved in policy.reservation.items():
        assert r.first_start[j] <= reserved + 1e-9


@settings(max_examples=100, deadline=None)
@given(parallel_instances())
def test_capacity_respected_and_fcfs_order(inst):
    submit, runtime, procs, cap, estimate = inst
    for policy in (fcfs(), easy()):
        r = run(policy, submit, runtime, procs, cap, estimate=estimate)
        assert (r.state == 1).all()
        # processors in use never exceed capacity: check at every start time
        starts, ends, p = r.first_start, r.end_time, np.asarray(procs)
        for t in starts:
            assert p[(starts <= t) & (ends > t)].sum() <= cap
        if policy.name == "fcfs":
            assert (np.diff(starts) >= 0).all()
        assert not np.isnan(starts).any() and all(math.isfinite(x) for x in ends)
