"""Batsim in and out: the jobs.csv export read and drawn by evalys, Batsim workload JSON as input,
and the round trip SWF -> our columns -> Batsim JSON -> our columns."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis import batsim, timeline
from marketsched.cli import main
from marketsched.scenario import Scenario, WorkloadSpec, run
from marketsched.workloads import load_trace, to_workload
from marketsched.workloads.batsim import BatsimFormatError, read_workload, workload_json, write_workload
from marketsched.workloads.swf import SWF_FIELDS, write_swf

matplotlib.use("Agg")

WORKLOAD_COLUMNS = ("job_id", "submit_time", "runtime", "runtime_estimate", "procs", "user_id")


def _export(tmp_path, mechanism="hb", parallel=False, jobs=120):
    jobs_ = Scenario(WorkloadSpec(synthetic_jobs=jobs, synthetic_nodes=8, parallel=parallel)).build()
    r = run(jobs_, mechanism, events=True)
    w = jobs_.workload
    segs = timeline.segments(r.events, w.procs, w.capacity)
    path = tmp_path / f"{mechanism}.csv"
    table = batsim.jobs_csv(w, segs, mechanism)
    table.to_csv(path, index=False)
    return path, table, w


def test_evalys_plots_the_export_and_its_gantt(tmp_path):
    evalys_jobset = pytest.importorskip("evalys.jobset", reason="evalys is in the test extra; not installed here")
    import matplotlib.pyplot as plt

    plt.close("all")  # figures another test of this process left open do not count
    for mechanism, parallel in (("hb", False), ("easy", True)):
        path, table, w = _export(tmp_path, mechanism, parallel)
        if mechanism == "hb":
            assert table["job_id"].str.contains("#").any()  # preempted jobs: the case that has several rows
        js = evalys_jobset.JobSet.from_csv(str(path), resource_bounds=(0, w.capacity - 1))
        js.plot(with_details=True)  # utilisation, queue (requested_number_of_resources), details and Gantt
        js.gantt()
        assert len(plt.get_fignums()) == 2
        plt.close("all")


def test_the_export_uses_the_current_column_name(tmp_path):
    _, table, _ = _export(tmp_path)
    assert "requested_number_of_resources" in table.columns
    assert "requested_number_of_processors" not in table.columns


def test_the_segments_of_a_preempted_job_say_they_are_one_job(tmp_path):
    _, t, w = _export(tmp_path)
    job = t["metadata"].str.extract(r"job=([^;]+)")[0]
    seg = t["metadata"].str.extract(r"segment=(\d+)/(\d+)").astype(int)
    # the linked id is the first segment's id, which is the job id (serial jobs here)
    assert (job == t["job_id"].str.split("#").str[0]).all()
    assert sorted(job.unique()) == sorted(str(j) for j in w.job_id)
    for jid, rows in t.groupby(job):
        k = seg.loc[rows.index]
        assert list(k[0]) == list(range(1, len(rows) + 1)) and (k[1] == len(rows)).all()
        assert (rows["submission_time"] == rows["submission_time"].iloc[0]).all()
        assert rows["success"].tolist() == [0] * (len(rows) - 1) + [rows["success"].iloc[-1]]
    assert (seg[1] > 1).any()


BATSIM = {
    "nb_res": 4,
    "jobs": [
        {"id": "w0!3", "subtime": 0, "walltime": 100, "res": 2, "profile": "short"},
        {"id": 1, "subtime": 5.5, "res": 1, "profile": "long", "user_id": 7},
        {"id": "2", "subtime": 5.5, "walltime": -1, "res": 4, "profile": "short"},
        {"id": "9", "subtime": 2, "res": 5, "profile": "short"},  # wider than the machine: dropped, counted
    ],
    "profiles": {"short": {"type": "delay", "delay": 10}, "long": {"type": "delay", "delay": 62.5}},
}


def test_batsim_workload_is_read_as_a_trace(tmp_path):
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(BATSIM))
    w, report = to_workload(load_trace(str(path)))
    assert report.dropped["too_wide"] == 1
    assert w.capacity == 4
    assert w.job_id.tolist() == [3, 1, 2]  # by submit time, ties in file order
    assert w.submit_time.tolist() == [0, 5.5, 5.5]
    assert w.runtime.tolist() == [10, 62.5, 10]
    np.testing.assert_array_equal(w.runtime_estimate, [100, np.nan, np.nan])
    assert w.procs.tolist() == [2, 1, 4] and w.user_id.tolist() == [-1, 7, -1]


def test_batsim_workload_through_simulate_with_transforms_and_models(tmp_path):
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(BATSIM))
    out = tmp_path / "r.parquet"
    r = CliRunner().invoke(main, ["simulate", "--trace", str(path), "--split", "--capacity", "0.5", "--mechanism",
                                  "hb", "--estimates", "exact", "--deadlines", "slack:factor=5", "--out", str(out)])
    assert r.exit_code == 0, r.output
    import pandas as pd

    t = pd.read_parquet(out)
    assert len(t) == 2 + 1 + 4  # split into serial copies
    from marketsched.results import read, rerun

    _, meta = read(out)
    assert meta["scenario"]["workload"]["trace_file"] == "wl.json"
    assert meta["scenario"]["workload"].get("name", "wl") == "wl"  # named like an SWF log: no suffix
    assert rerun(meta).equals(t)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["profiles"].update(short={"type": "parallel_homogeneous", "cpu": 1e9, "com": 0}),
     "type 'parallel_homogeneous'"),
    (lambda d: d["jobs"][1].update(profile="nope"), "profile 'nope' is not among"),
    (lambda d: d["jobs"][2].update(id="w0!x"), "id 'w0!x' is not a whole number"),
    (lambda d: d["jobs"][0].pop("subtime"), "missing 'subtime'"),
    (lambda d: d.update(nb_res=0), "nb_res must be a whole number >= 1"),
    (lambda d: d["profiles"]["long"].update(delay=-1), "expected a finite number >= 0"),
    (lambda d: d["profiles"]["long"].update(delay=float("inf")), "has delay inf, expected a finite number"),
    (lambda d: d["jobs"][0].update(walltime=float("inf")), "walltime inf is not a finite number"),
    (lambda d: d["jobs"][0].update(walltime=float("nan")), "walltime nan is not a finite number"),
])
def test_bad_batsim_workload_names_the_problem_and_the_job(tmp_path, change, message):
    doc = json.loads(json.dumps(BATSIM))
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BatsimFormatError, match=message) as exc:
        read_workload(path)
    assert str(path) in str(exc.value)
    r = CliRunner().invoke(main, ["simulate", "--trace", str(path)])
    assert r.exit_code != 0 and message.split("'")[0] in r.output and "Traceback" not in r.output


def test_not_json_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"nb_res": 4,\n "jobs": [}')
    with pytest.raises(BatsimFormatError, match=r"not JSON \(line 2, column"):
        read_workload(path)


def _round_trip(tmp_path, swf_path):
    w, _ = to_workload(load_trace(str(swf_path), column_cache=False))
    back, report = to_workload(read_workload(write_workload(w, tmp_path / "wl.json")))
    assert report.n_dropped == 0 and back.capacity == w.capacity
    assert back.name == "wl"  # the file's name without ".json", as an SWF log's without ".swf"
    for c in WORKLOAD_COLUMNS:
        np.testing.assert_array_equal(getattr(back, c), getattr(w, c), err_msg=c)
    return w


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 0, 1.5, 10, 3600]), st.sampled_from([0, 1, 7.25, 100, 86400]),
                          st.integers(1, 8), st.sampled_from([-1, 60, 100, 7200]), st.integers(-1, 3)),
                min_size=1, max_size=30))
def test_round_trip_swf_to_columns_to_batsim_to_columns(tmp_path_factory, rows):
    n = len(rows)
    cols = {f: np.full(n, -1) for f in SWF_FIELDS}
    cols["job_number"] = np.arange(1, n + 1)
    cols["submit_time"] = np.cumsum([r[0] for r in rows])
    cols["run_time"] = np.array([r[1] for r in rows])
    cols["requested_procs"] = np.array([r[2] for r in rows])
    cols["requested_time"] = np.array([r[3] for r in rows])
    cols["user_id"] = np.array([r[4] for r in rows])
    folder = tmp_path_factory.mktemp("rt")
    swf = write_swf(cols, folder / "t.swf", header={"MaxProcs": "8"})
    _round_trip(folder, swf)


@pytest.mark.trace
def test_round_trip_of_a_real_trace(tmp_path, trace_path):
    w = _round_trip(tmp_path, trace_path("KTH-SP2-1996-2.1-cln"))
    assert len(w) > 28_000
    assert np.isnan(w.runtime_estimate).sum() < len(w)  # estimates carried as walltimes


def test_workload_json_uses_one_delay_profile_per_run_time():
    w = Scenario(WorkloadSpec(synthetic_jobs=50, synthetic_nodes=4)).workload.build()
    doc = workload_json(w)
    assert len(doc["profiles"]) == len(set(w.runtime.tolist()))
    assert all(p["type"] == "delay" for p in doc["profiles"].values())
    assert doc["nb_res"] == 4 and len(doc["jobs"]) == 50


def test_cli_exports_the_workload_of_a_run_as_batsim_json_before_the_split(tmp_path):
    res = tmp_path / "r.parquet"
    r = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "80", "--synthetic-nodes", "8", "--split",
                                  "--capacity", "0.5", "--mechanism", "easy", "--out", str(res)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "wl.json"
    r = CliRunner().invoke(main, ["export", str(res), "--format", "batsim-workload", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "(before --split)" in r.output
    back, _ = to_workload(read_workload(out))
    expected = Scenario.builtin(80, 8, capacity=0.5).workload.build()  # simulate's built-in workload
    assert back.capacity == expected.capacity == 4 and len(back) == 80
    for c in WORKLOAD_COLUMNS:
        np.testing.assert_array_equal(getattr(back, c), getattr(expected, c), err_msg=c)
    r = CliRunner().invoke(main, ["export", str(res), "--format", "batsim", "--out", str(tmp_path / "j.csv")])
    assert r.exit_code != 0 and "--format batsim needs the run's event log" in r.output


def test_a_split_workload_is_not_written_with_repeated_ids():
    from marketsched.workloads import split_parallel

    w = Scenario(WorkloadSpec(synthetic_jobs=30, synthetic_nodes=8, parallel=True)).workload.build()
    with pytest.raises(ValueError, match="job ids repeat"):
        workload_json(split_parallel(w))
