"""FCFS and EASY backfilling on hand-made cases and the reservation guarantee on random ones."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.engine.simulator import Simulator
from marketsched.mechanisms.online.backfilling import Backfilling, easy, fcfs
from marketsched.workloads.workload import Workload


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


class Audited(Backfilling):
    """EASY that records each head job's reservation when it is first computed."""

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
                    self.reservation[q[0]] = e
                    break


@st.composite
def parallel_instances(draw):
    n = draw(st.integers(1, 25))
    cap = draw(st.integers(1, 8))
    submit = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    runtime = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    procs = draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    return submit, runtime, procs, cap


@settings(max_examples=200, deadline=None)
@given(parallel_instances())
def test_backfilling_never_delays_the_head_reservation(inst):
    submit, runtime, procs, cap = inst
    policy = Audited(backfill=True)
    r = run(policy, submit, runtime, procs, cap, estimate=runtime)  # exact estimates
    for j, reserved in policy.reservation.items():
        assert r.first_start[j] <= reserved + 1e-9


@settings(max_examples=100, deadline=None)
@given(parallel_instances())
def test_capacity_respected_and_fcfs_order(inst):
    submit, runtime, procs, cap = inst
    for policy in (fcfs(), easy()):
        r = run(policy, submit, runtime, procs, cap, estimate=runtime)
        assert (r.state == 1).all()
        # processors in use never exceed capacity: check at every start time
        starts, ends, p = r.first_start, r.end_time, np.asarray(procs)
        for t in starts:
            assert p[(starts <= t) & (ends > t)].sum() <= cap
        if policy.name == "fcfs":
            assert (np.diff(starts) >= 0).all()
