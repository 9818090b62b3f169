"""Pictures of a run (marketsched.analysis.timeline, .plots, .batsim; `marketsched plot/export`).

Every plotted series is compared with a plain computation from its definition: per bin, the
overlap of each job's running (or waiting) intervals with the bin, summed job by job.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.analysis import batsim, plots, timeline
from marketsched.analysis.metrics import summarize
from marketsched.cli import main
from marketsched.engine.events import replay
from marketsched.engine.records import FinalState
from marketsched.scenario import prepare_jobs, run
from marketsched.workloads.workload import Workload


def _jobs(submit, runtime, procs, capacity, seed=1):
    w = Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=capacity,
                              runtime_estimate=np.asarray(runtime, dtype=float) * 2)
    return prepare_jobs(w, "bimodal", seed)


@st.composite
def workloads(draw, serial: bool):
    n = draw(st.integers(3, 25))
    cap = draw(st.integers(1, 4))
    submit = np.cumsum(draw(st.lists(st.sampled_from([0, 0, 5, 10, 30]), min_size=n, max_size=n)))  # ties
    runtime = draw(st.lists(st.sampled_from([1, 10, 10, 40, 100]), min_size=n, max_size=n))
    procs = [1] * n if serial else draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    return _jobs(submit, runtime, procs, cap, seed=draw(st.integers(0, 5)))


def _plain_running(segs, edges):
    """Per bin: processor-seconds run in the bin / bin width, segment by segment."""
    out = np.zeros(len(edges) - 1)
    for a, b, p in zip(segs["start"], segs["end"], segs["procs"]):
        for i in range(len(out)):
            out[i] += p * max(0.0, min(b, edges[i + 1]) - max(a, edges[i]))
    return out / np.diff(edges)


def _waiting_intervals(segs, submit, end):
    """Per row: the intervals it waited (submitted, not running, not ended)."""
    out = {}
    for r in range(len(submit)):
        s = segs[segs["row"] == r].sort_values("start")
        opens = [submit[r], *s["end"].tolist()]
        closes = [*s["start"].tolist(), end[r] if end[r] == end[r] else np.inf]
        out[r] = [(a, b) for a, b in zip(opens, closes) if b > a]
    return out


def _plain_queue(waits, edges):
    out = np.zeros(len(edges) - 1)
    for iv in waits.values():
        for a, b in iv:
            for i in range(len(out)):
                out[i] += max(0.0, min(b, edges[i + 1]) - max(a, edges[i]))
    return out / np.diff(edges)


def _plain_max_queued_bid(waits, bid, edges):
    """Per bin: time-average of the highest waiting bid over the part of the bin with a queue."""
    out = np.full(len(edges) - 1, np.nan)
    for i in range(len(out)):
        points = sorted({edges[i], edges[i + 1], *[x for iv in waits.values() for a, b in iv for x in (a, b)
                                                   if edges[i] < x < edges[i + 1]]})
        total = cover = 0.0
        for a, b in zip(points, points[1:]):
            m = (a + b) / 2
            w = [bid[r] for r, iv in waits.items() if any(x <= m < y for x, y in iv)]
            if w:
                total += max(w) * (b - a)
                cover += b - a
        if cover > 0:
            out[i] = total / cover
    return out


def _check_series(jobs, mechanism, bins):
    r = run(jobs, mechanism, events=True)
    w = jobs.workload
    segs = timeline.segments(r.events, w.procs, w.capacity)
    end = r.records.end_time
    series = timeline.binned(segs, w.submit_time, end, w.capacity, bins=bins, bid=jobs.bid, events=r.events)
    edges = np.r_[series.index.to_numpy(), np.nanmax(end)]
    np.testing.assert_allclose(series["utilisation"], _plain_running(segs, edges) / w.capacity, atol=1e-9)
    waits = _waiting_intervals(segs, w.submit_time, end)
    np.testing.assert_allclose(series["queue"], _plain_queue(waits, edges), atol=1e-9)
    np.testing.assert_allclose(series["queued_bid"], _plain_max_queued_bid(waits, jobs.bid, edges), atol=1e-9)
    assert series["paid"].iloc[-1] == pytest.approx(r.records.payment.sum(), abs=1e-6)
    return r, segs, series


def _check_segments(r, segs, w):
    """Work run = run time x processors for completed jobs; no processor holds two jobs at once."""
    done = r.records.state == FinalState.COMPLETED
    per_row = ((segs["end"] - segs["start"]) * segs["procs"]).groupby(segs["row"]).sum()
    for j in np.flatnonzero(done):
        assert per_row[j] == pytest.approx(w.runtime[j] * w.procs[j])
    assert (segs.groupby("row").size() - 1).reindex(range(len(w)), fill_value=0).tolist() == r.records.preemptions.tolist()
    busy: dict[int, list[tuple[float, float]]] = {}
    for a, b, res in zip(segs["start"], segs["end"], segs["resources"]):
        ids = [p for part in res.split() for p in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]
        for p in ids:
            assert 0 <= p < w.capacity
            busy.setdefault(p, []).append((a, b))
    for iv in busy.values():
        iv.sort()
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(iv, iv[1:]))


@settings(max_examples=30, deadline=None)
@given(workloads(serial=True), st.integers(1, 12))
def test_hb_series_equal_plain_computations(jobs, bins):
    r, segs, series = _check_series(jobs, "hb", bins)
    _check_segments(r, segs, jobs.workload)


@settings(max_examples=30, deadline=None)
@given(workloads(serial=False), st.integers(1, 12))
def test_easy_series_equal_plain_computations(jobs, bins):
    r, segs, series = _check_series(jobs, "easy", bins)
    _check_segments(r, segs, jobs.workload)


@pytest.mark.parametrize("mechanism,parallel", [("hb", False), ("easy", True)])
def test_utilisation_from_events_equals_metrics(mechanism, parallel):
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=300, synthetic_nodes=8, parallel=parallel)).build()
    r = run(jobs, mechanism, events=True)
    w = jobs.workload
    segs = timeline.segments(r.events, w.procs, w.capacity)
    end = r.records.end_time
    t0, t1 = float(w.submit_time[0]), float(np.nanmax(end))
    ours = summarize(w, r.records)["utilization"]
    assert timeline.busy_utilisation(segs, w.capacity, t0, t1) == pytest.approx(ours, rel=1e-12)
    series = timeline.binned(segs, w.submit_time, end, w.capacity, bins=37)
    assert float(series["utilisation"].mean()) == pytest.approx(ours, rel=1e-9)  # equal bins: mean of the bins
    if mechanism == "hb":
        assert r.records.preemptions.sum() > 0  # the Gantt chart has preemptions to show


def test_segments_assign_processors_first_fit():
    # two serial jobs, then one that waits: it takes the lowest free id when the first ends
    w = Workload.from_columns(submit_time=[0, 0, 1], runtime=[5, 10, 3], procs=[1, 1, 1], capacity=2)
    ev = pd.DataFrame({"time": [0.0, 0.0, 5.0, 5.0, 8.0, 10.0], "row": [0, 1, 0, 2, 2, 1], "job_id": [1, 2, 1, 3, 3, 2],
                       "event": ["start", "start", "finish", "start", "finish", "finish"]})
    segs = timeline.segments(ev, w.procs, w.capacity)
    assert segs[["row", "start", "end", "resources"]].values.tolist() == [[0, 0.0, 5.0, "0"], [1, 0.0, 10.0, "1"],
                                                                         [2, 5.0, 8.0, "0"]]


def test_interval_set():
    assert timeline._interval_set([0, 1, 2, 3, 7]) == "0-3 7"
    assert timeline._interval_set([4]) == "4"


def test_gantt_refuses_large_runs():
    segs = pd.DataFrame({"row": range(10), "start": 0.0, "end": 1.0, "procs": 1, "resources": "0", "first": True})
    with pytest.raises(ValueError, match="--jobs"):
        plots.gantt(segs, 1, max_jobs=5)


def test_figures_are_written(tmp_path):
    jobs = _jobs([0, 0, 1, 2, 2, 3], [10, 20, 5, 5, 30, 1], [1] * 6, 2)
    r = run(jobs, "hb", events=True)
    w = jobs.workload
    segs = timeline.segments(r.events, w.procs, w.capacity)
    series = timeline.binned(segs, w.submit_time, r.records.end_time, w.capacity, bins=10, bid=jobs.bid, events=r.events)
    from marketsched.results import job_table_of

    table = job_table_of(jobs, r)
    paths = [*plots.save(plots.gantt(segs, w.capacity), tmp_path / "g.png", tmp_path / "g.svg"),
             *plots.save(plots.over_time(series), tmp_path / "t.png"),
             *plots.save(plots.slowdown_by_band(table), tmp_path / "s.svg")]
    assert [p.stat().st_size > 1000 for p in paths] == [True] * 4
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    assert b"<svg" in (tmp_path / "g.svg").read_bytes()[:1000]
    with pytest.raises(ValueError, match="png or svg"):
        plots.save(plots.gantt(segs, w.capacity), tmp_path / "g.pdf")


def _simulate(tmp_path, *args):
    res, ev = tmp_path / "r.parquet", tmp_path / "e.parquet"
    out = CliRunner().invoke(main, ["simulate", "--synthetic-jobs", "200", "--synthetic-nodes", "8", *args,
                                    "--out", str(res), "--events", str(ev)])
    assert out.exit_code == 0, out.output
    return res, ev


def test_cli_plot_and_export(tmp_path):
    res, ev = _simulate(tmp_path, "--mechanism", "hb")
    out = CliRunner().invoke(main, ["plot", str(res), "--events", str(ev), "--out", str(tmp_path / "fig"),
                                    "--format", "png", "--format", "svg"])
    assert out.exit_code == 0, out.output
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert names == sorted(f"hb-kth-{k}.{f}" for k in ("gantt", "timeline", "slowdown") for f in ("png", "svg"))
    csv = tmp_path / "jobs.csv"
    out = CliRunner().invoke(main, ["export", str(res), "--events", str(ev), "--format", "batsim", "--out", str(csv)])
    assert out.exit_code == 0, out.output
    t = pd.read_csv(csv)
    assert list(t.columns) == batsim.COLUMNS
    table = pd.read_parquet(res)
    assert len(t) == len(table) + int(table["preemptions"].sum())  # one row per run segment
    assert t["job_id"].is_unique


def test_cli_plot_errors(tmp_path):
    res, ev = _simulate(tmp_path, "--mechanism", "easy")
    out = CliRunner().invoke(main, ["plot", str(res), "--events", str(ev), "--run", "nope"])
    assert out.exit_code != 0 and "no run 'nope'" in out.output


def test_batsim_rows_describe_the_run():
    jobs = _jobs([0, 0, 1, 2, 2, 3], [10, 20, 5, 5, 30, 1], [1] * 6, 2)
    r = run(jobs, "hb", events=True)
    w = jobs.workload
    segs = timeline.segments(r.events, w.procs, w.capacity)
    t = batsim.jobs_csv(w, segs, "hb")
    assert (t["finish_time"] - t["starting_time"] == t["execution_time"]).all()
    done = t[t["success"] == 1]
    base = done["job_id"].str.split("#").str[0]  # the last segment of a resumed job is <id>#<k>
    assert sorted(base) == sorted(str(j) for j in w.job_id)
    rec = replay(r.events, len(w))
    assert dict(zip(base, done["finish_time"])) == {str(j): e for j, e in zip(w.job_id, rec.end_time)}
    assert (t["job_id"].str.contains("#") == (t["metadata"].str.extract(r"segment=(\d+)/")[0] != "1")).all()


def test_evalys_reads_the_export_and_agrees_on_utilisation(tmp_path):
    evalys_jobset = pytest.importorskip("evalys.jobset", reason="evalys is in the test extra; not installed here")
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=300, synthetic_nodes=8, parallel=True)).build()
    for mechanism in ("easy", "hb"):
        if mechanism == "hb":
            jobs = Scenario(WorkloadSpec(synthetic_jobs=300, synthetic_nodes=8)).build()
        r = run(jobs, mechanism, events=True)
        w = jobs.workload
        segs = timeline.segments(r.events, w.procs, w.capacity)
        path = tmp_path / f"{mechanism}.csv"
        batsim.jobs_csv(w, segs, mechanism).to_csv(path, index=False)
        js = evalys_jobset.JobSet.from_csv(str(path), resource_bounds=(0, w.capacity - 1))
        first, last = float(segs["start"].min()), float(segs["end"].max())
        busy = js.mean_utilisation(first, last) * (last - first)  # processor-seconds evalys sees
        ours = summarize(w, r.records)["utilization"]
        assert busy / (w.capacity * (last - float(w.submit_time[0]))) == pytest.approx(ours, rel=1e-6)


def _hb_run(n=60, nodes=4):
    from marketsched.scenario import Scenario, WorkloadSpec

    jobs = Scenario(WorkloadSpec(synthetic_jobs=n, synthetic_nodes=nodes)).build()
    r = run(jobs, "hb", events=True)
    w = jobs.workload
    return jobs, r, timeline.segments(r.events, w.procs, w.capacity)


def test_gantt_labels_each_bar_with_its_job_id_and_colours_jobs_apart():
    from matplotlib.colors import to_hex

    jobs, r, segs = _hb_run()
    fig = plots.gantt(segs, jobs.workload.capacity)
    ax = fig.axes[0]
    bars = ax.collections[0]
    assert sorted(t.get_text() for t in ax.texts) == sorted(str(j) for j in segs["job_id"])  # serial: one bar each
    assert len({to_hex(c) for c in bars.get_facecolors()}) > 20  # not 20 repeating colours
    fig = plots.gantt(segs, jobs.workload.capacity, labels=False)
    assert not fig.axes[0].texts


def test_gantt_coloured_by_value_band_has_a_colour_and_a_legend_entry_per_band():
    from matplotlib.colors import to_hex

    from marketsched.analysis.metrics import value_band

    jobs, r, segs = _hb_run()
    band = value_band(jobs.true_value)
    fig = plots.gantt(segs, jobs.workload.capacity, group=band, group_name="value band")
    ax = fig.axes[0]
    faces = [to_hex(c) for c in ax.collections[0].get_facecolors()]
    by_band: dict = {}
    for row, face in zip(segs["row"], faces):
        by_band.setdefault(band[row], set()).add(face)
    assert all(len(f) == 1 for f in by_band.values()) and len(set.union(*by_band.values())) == len(by_band)
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "value band"
    assert set(by_band) <= {t.get_text() for t in legend.get_texts()}


def test_the_kth_price_is_named_only_for_the_runs_it_describes():
    jobs, r, segs = _hb_run()
    w = jobs.workload
    series = timeline.binned(segs, w.submit_time, r.records.end_time, w.capacity, bins=10, bid=jobs.bid,
                             events=r.events)

    def legend(fig):
        return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]

    assert "highest queued bid (the k-th price)" in legend(plots.over_time(series, kth_price=True))
    assert not any("k-th" in t for t in legend(plots.over_time(series)))


def test_cli_plot_colours_by_user_and_names_no_kth_price_for_first_price(tmp_path):
    res, ev = _simulate(tmp_path, "--mechanism", "hb", "--param", "pricing=first")
    out = CliRunner().invoke(main, ["plot", str(res), "--events", str(ev), "--out", str(tmp_path / "fig"),
                                    "--format", "svg", "--colour-by", "user"])
    assert out.exit_code == 0, out.output
    assert b"k-th" not in (tmp_path / "fig" / "hb-first-timeline.svg").read_bytes()
