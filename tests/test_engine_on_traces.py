"""The engine on slices of real traces (needs MARKETSCHED_TRACES; CI sets it)."""

import numpy as np

from marketsched.engine.records import FinalState
from marketsched.scenario import simulate, true_values
from marketsched.workloads import first_jobs, read_swf, scale_capacity, split_parallel, to_workload


def test_hb_kth_on_lpc_slice(trace_path):
    w, report = to_workload(read_swf(trace_path("LPC-EGEE-2004-1.2-cln")))
    assert w.capacity == 140
    w = scale_capacity(first_jobs(w, 20_000), 0.75)
    assert w.capacity == 105
    values = true_values(w, "bimodal", seed=3)
    kth = simulate(w, "hb", values, "kth")
    first = simulate(w, "hb", values, "first")
    assert (kth.state == FinalState.COMPLETED).all()
    np.testing.assert_array_equal(kth.end_time, first.end_time)  # same allocation
    assert (kth.payment <= first.payment + 1e-6).all()
    # each job's payment is at most its bid times its run time when bids are at least 1
    rich = values >= 1
    assert (first.payment[rich] <= values[rich] * w.runtime[rich] + 1e-6).all()


def test_easy_beats_fcfs_on_sdsc_sp2_slice(trace_path):
    w, _ = to_workload(read_swf(trace_path("SDSC-SP2-1998-4.2-cln")))
    w = first_jobs(w, 8_000)
    f, e = simulate(w, "fcfs"), simulate(w, "easy")

    def wait(r):
        return np.mean(r.first_start - w.submit_time)

    assert (e.state == FinalState.COMPLETED).all() and (f.state == FinalState.COMPLETED).all()
    assert wait(e) < wait(f)


def test_split_kth_workload_runs_on_kth_trace(trace_path):
    w, _ = to_workload(read_swf(trace_path("KTH-SP2-1996-2.1-cln")))
    w = scale_capacity(split_parallel(first_jobs(w, 3_000)), 0.75)
    values = true_values(w, "uniform", seed=1)
    r = simulate(w, "wspt", values, "kth")
    assert r.counts()["completed"] == len(w)
    # serial copies of one job share its value
    parent = w.meta["parent"]
    assert np.all(values == values[np.searchsorted(parent, parent)])
