import heapq

import numpy as np
import pytest

from marketsched.workloads.synthetic import ROUND_ESTIMATES, round_up_estimate, synthetic_workload


def fcfs_serial_waits(submit, runtime, capacity):
    """Waits of serial jobs under FCFS on ``capacity`` nodes (a reference queue, 5k jobs)."""
    free = [0.0] * capacity
    waits = np.empty(len(submit))
    for i, (s, r) in enumerate(zip(submit.tolist(), runtime.tolist())):
        start = max(heapq.heappop(free), s)
        waits[i] = start - s
        heapq.heappush(free, start + r)
    return waits


def test_default_is_a_valid_serial_workload():
    w = synthetic_workload()
    assert len(w) == 5000 and w.capacity == 64
    assert (w.procs == 1).all()
    assert np.all(np.diff(w.submit_time) >= 0) and w.submit_time[0] == 0
    assert (w.runtime >= 1).all() and np.array_equal(w.runtime, np.round(w.runtime))
    assert (w.runtime_estimate >= w.runtime).all()
    est = w.runtime_estimate
    assert (np.isin(est, ROUND_ESTIMATES) | ((est % 86400 == 0) & (est > ROUND_ESTIMATES[-1]))).all()


def test_deterministic_per_seed():
    a, b, c = synthetic_workload(seed=5), synthetic_workload(seed=5), synthetic_workload(seed=6)
    for k in a.columns:
        np.testing.assert_array_equal(a.columns[k], b.columns[k])
    assert not np.array_equal(a.runtime, c.runtime)


@pytest.mark.parametrize("load", [0.5, 0.9, 1.2])
def test_offered_load_is_close_to_target(load):
    w = synthetic_workload(n_jobs=20_000, load=load, seed=1)
    offered = (w.runtime * w.procs).sum() / w.capacity / w.submit_time[-1]
    assert abs(offered / load - 1) < 0.1


def test_load_0_9_makes_a_queue_and_light_load_does_not():
    waits = fcfs_serial_waits(*(lambda w: (w.submit_time, w.runtime, w.capacity))(synthetic_workload(load=0.9)))
    assert (waits > 0).mean() > 0.2  # real competition: a large share of jobs waits
    waits_light = fcfs_serial_waits(
        *(lambda w: (w.submit_time, w.runtime, w.capacity))(synthetic_workload(load=0.3, seed=0))
    )
    assert (waits_light > 0).mean() < 0.05


def test_daily_cycle():
    w = synthetic_workload(n_jobs=20_000, seed=2)
    hour = (w.submit_time % 86400) // 3600
    counts = np.bincount(hour.astype(int), minlength=24)
    assert counts[12:17].sum() > 2 * counts[0:5].sum()  # afternoon peak vs night


def test_parallel_procs_are_powers_of_two_within_capacity():
    w = synthetic_workload(parallel=True, capacity=100, seed=3)
    assert w.procs.max() <= 64 and set(np.unique(w.procs)) <= {1, 2, 4, 8, 16, 32, 64}
    assert 0.2 < (w.procs == 1).mean() < 0.45


def test_round_up_estimate():
    np.testing.assert_array_equal(round_up_estimate(np.array([1, 60, 61, 3600, 200000])),
                                  [60, 60, 300, 3600, 259200])


@pytest.mark.parametrize("kwargs", [dict(n_jobs=0), dict(capacity=0), dict(load=0), dict(load=float("nan")),
                                    dict(amplitude=1.0), dict(p_long=2)])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        synthetic_workload(**kwargs)
