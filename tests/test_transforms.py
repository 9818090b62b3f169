import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.workloads.swf import SWF_FIELDS, SwfLog, read_swf
from marketsched.workloads.transforms import (
    DropReport,
    first_jobs,
    scale_capacity,
    split_parallel,
    time_window,
    to_workload,
)
from marketsched.workloads.values import per_job
from marketsched.workloads.workload import Workload


def make_log(rows, max_procs=8):
    """rows: dicts of a few SWF fields; every other field is -1."""
    cols = {f: np.array([r.get(f, -1) for r in rows], dtype=np.float64) for f in SWF_FIELDS}
    for f in SWF_FIELDS:
        if f not in ("submit_time", "run_time", "requested_time", "average_cpu_time"):
            cols[f] = cols[f].astype(np.int64)
    header = {} if max_procs is None else {"MaxProcs": str(max_procs)}
    return SwfLog(columns=cols, header=header)


ROWS = [
    dict(job_number=1, submit_time=0, run_time=100, requested_procs=2, allocated_procs=2, requested_time=3600,
         user_id=3, status=1),
    dict(job_number=2, submit_time=5, run_time=-1, requested_procs=1, allocated_procs=0, status=5),  # cancelled
    dict(job_number=3, submit_time=7, run_time=0, requested_procs=-1, allocated_procs=4, status=1),  # CTC style
    dict(job_number=4, submit_time=9, run_time=50, requested_procs=-1, allocated_procs=-1, status=1),  # no procs
    dict(job_number=5, submit_time=11, run_time=50, requested_procs=16, allocated_procs=16, status=1),  # too wide
    dict(job_number=6, submit_time=-3, run_time=50, requested_procs=1, allocated_procs=1, status=1),  # bad submit
    dict(job_number=7, submit_time=12, run_time=30, requested_procs=1, allocated_procs=1, requested_time=60,
         status=0),
    dict(job_number=8, submit_time=4, run_time=-1, requested_procs=-1, allocated_procs=-1, status=5),  # 2 reasons
]


def test_to_workload_columns_and_drop_counts():
    w, report = to_workload(make_log(ROWS), name="toy")
    assert isinstance(w, Workload) and w.name == "toy" and w.capacity == 8
    assert w.job_id.tolist() == [1, 3, 7]  # sorted by submit time
    assert w.procs.tolist() == [2, 4, 1]  # job 3 falls back to allocated procs
    assert w.runtime.tolist() == [100, 0, 30]  # run time 0 kept
    assert w.runtime_estimate[0] == 3600 and np.isnan(w.runtime_estimate[1]) and w.runtime_estimate[2] == 60
    assert w.user_id.tolist() == [3, -1, -1]
    # each job counted under its first reason: job 8 is cancelled, not "no_procs"
    assert report.dropped == {"cancelled": 2, "bad_submit": 1, "no_procs": 1, "too_wide": 1}
    assert (report.total, report.kept, report.n_dropped) == (8, 3, 5)
    text = str(report)
    assert "kept 3 of 8 jobs, dropped 5" in text and "cancelled" in text and "too_wide" in text
    assert w.meta["drops"][-1] is report


def test_to_workload_capacity_sources():
    assert to_workload(make_log(ROWS, max_procs=None))[0].capacity == 16  # widest job
    w, report = to_workload(make_log(ROWS), capacity=2)
    assert w.capacity == 2 and report.dropped["too_wide"] == 2  # 4- and 16-proc jobs
    with pytest.raises(ValueError, match="capacity must be a positive whole number"):
        to_workload(make_log(ROWS), capacity=0)


def test_to_workload_options():
    log = make_log(ROWS)
    w, report = to_workload(log, drop_zero_runtime=True)
    assert w.job_id.tolist() == [1, 7] and report.dropped["zero_runtime"] == 1
    w, report = to_workload(log, keep_status={1})
    assert w.job_id.tolist() == [1, 3] and report.dropped["status"] == 1
    rows = [dict(job_number=1, submit_time=0, run_time=10, requested_procs=8, allocated_procs=4)]
    assert to_workload(make_log(rows), procs_from="allocated")[0].procs.tolist() == [4]
    assert to_workload(make_log(rows))[0].procs.tolist() == [8]
    with pytest.raises(ValueError, match="procs_from"):
        to_workload(make_log(rows), procs_from="used")


def small_workload():
    return Workload.from_columns(
        submit_time=[0, 10, 10, 20], runtime=[5, 6, 7, 8], procs=[1, 3, 2, 4], runtime_estimate=[9, np.nan, 9, 9],
        job_id=[11, 12, 13, 14], user_id=[1, 2, 3, 4], capacity=4, name="small",
    )


def test_split_parallel_copies_are_consecutive_and_map_back():
    w = small_workload()
    s = split_parallel(w)
    assert len(s) == 10 and s.capacity == 4 and (s.procs == 1).all()
    assert s.job_id.tolist() == [11, 12, 12, 12, 13, 13, 14, 14, 14, 14]
    assert s.meta["parent"].tolist() == [0, 1, 1, 1, 2, 2, 3, 3, 3, 3]
    assert s.runtime.tolist() == [5, 6, 6, 6, 7, 7, 8, 8, 8, 8]
    assert s.submit_time.tolist() == [0, 10, 10, 10, 10, 10, 20, 20, 20, 20]
    assert np.isnan(s.runtime_estimate[1:4]).all() and s.user_id[4] == 3
    # copies share their original's value: drawn per original job, then repeated
    v = per_job(s, "bimodal", rng=7)
    orig = per_job(w, "bimodal", rng=7)
    np.testing.assert_array_equal(v, np.repeat(orig, w.procs))
    assert split_parallel(split_parallel(w)).meta["parent"].tolist() == list(range(10))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 500), st.integers(1, 16)), min_size=1, max_size=40))
def test_split_parallel_properties(jobs):
    submit, runtime, procs = (np.array(c) for c in zip(*jobs))
    w = Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=16)
    s = split_parallel(w)
    assert len(s) == w.procs.sum()
    assert np.all(np.diff(s.submit_time) >= 0)
    parent = s.meta["parent"]
    np.testing.assert_array_equal(np.bincount(parent, minlength=len(w)), w.procs)
    np.testing.assert_array_equal(s.runtime, w.runtime[parent])
    assert np.all(np.diff(parent) >= 0)  # consecutive copies
    # total work is unchanged
    assert (s.runtime * s.procs).sum() == (w.runtime * w.procs).sum()


def test_scale_capacity():
    w = Workload.from_columns(submit_time=[0, 1], runtime=[1, 1], procs=[1, 1], capacity=140)
    s = scale_capacity(w, 0.75)
    assert s.capacity == 105 and s.meta["original_capacity"] == 140
    assert scale_capacity(Workload.from_columns(submit_time=[0], runtime=[1], capacity=100), 0.29).capacity == 29
    with pytest.raises(ValueError, match=r"2 jobs no longer fit on 2 processors .* row 1 \(job 12\) with 3 processors"):
        scale_capacity(small_workload(), 0.5)
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="fraction"):
            scale_capacity(w, bad)
    with pytest.raises(ValueError, match="at least 1"):
        scale_capacity(w, 0.001)


def test_first_jobs_and_time_window_report_drops():
    w = split_parallel(small_workload())
    f = first_jobs(w, 4)
    assert len(f) == 4 and f.meta["parent"].tolist() == [0, 1, 1, 1]
    assert f.meta["drops"][-1].dropped == {"after_first_n": 6}
    assert len(first_jobs(w, 100)) == 10
    with pytest.raises(ValueError, match="n must be"):
        first_jobs(w, -1)
    t = time_window(w, 10, 20)
    assert len(t) == 5 and t.submit_time.tolist() == [10] * 5
    assert t.meta["drops"][-1].dropped == {"before_window": 1, "after_window": 4}
    r = time_window(w, 5, 25, rebase=True)
    assert r.submit_time.tolist() == [5] * 5 + [15] * 4
    assert len(w) == 10 and w.submit_time[0] == 0  # the input is untouched
    with pytest.raises(ValueError, match="start <= end"):
        time_window(w, 5, 1)


def test_drop_report_str():
    r = DropReport("step", 10, {"cancelled": 3})
    assert r.kept == 7 and "kept 7 of 10 jobs, dropped 3" in str(r)
    assert r.as_dict() == {"step": "step", "total": 10, "kept": 7, "dropped": {"cancelled": 3}}


@pytest.mark.trace
def test_lpc_egee_clean_split_scale(trace_path):
    """LPC-EGEE as Shudler et al. (2010) use it: serial jobs on 75% of 140 nodes."""
    w, report = to_workload(read_swf(trace_path("LPC-EGEE-2004-1.2-cln")))
    assert report.total == 234_889 and report.dropped["cancelled"] == 14_194
    assert len(w) == 220_695 and w.capacity == 140  # Shudler et al. (2010), Table I: 219,704
    s = scale_capacity(split_parallel(w), 0.75)
    assert len(s) == 220_695 and s.capacity == 105
    assert abs(s.runtime.mean() - 3196.16) < 0.01  # Table I: 3,212 s


@pytest.mark.trace
def test_hpc2n_splits_into_1_29_million(trace_path):
    w, _ = to_workload(read_swf(trace_path("HPC2N-2002-2.2-cln")))
    assert len(split_parallel(w)) == 1_285_282
