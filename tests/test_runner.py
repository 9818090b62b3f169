"""The experiment runner: grid expansion, batching, resume, failing cells, determinism, Ray optional."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from marketsched.analysis.metrics import job_table
from marketsched.behaviour.bidding import draw_shading, make_bids
from marketsched.experiments.runner import (
    CELL_COLUMNS,
    Cell,
    Grid,
    cells_of,
    load_results,
    make_batches,
    run_grid,
    simulate_pricings,
)
from marketsched.scenario import WorkloadSpec, simulate, true_values

TRACE = "synthetic:400:16"


def small_grid(seeds=(1, 2), **kw):
    base = dict(traces=[TRACE], capacities=[0.5], mechanisms=["hb", "wspt"], pricings=["first", "kth"],
                behaviours=["ft", "srg"], betas=[0.5, 0.9], seeds=list(seeds))
    base.update(kw)
    return Grid(**base)


def test_grid_expansion_collapses_ft_betas_and_dedupes():
    g = small_grid()
    cells = g.cells()
    # per seed: 2 mechanisms x 2 pricings x (1 FT + 2 SRG betas)
    assert len(cells) == 2 * 2 * 2 * 3
    assert all(c.beta == 0.0 for c in cells if c.behaviour == "ft")
    assert len(cells_of(g, g, cells[0])) == len(cells)


def test_batches_share_a_workload_and_seed():
    cells = small_grid().cells()
    batches = make_batches(cells, max_batch=5)
    assert sum(len(b) for b in batches) == len(cells)
    for b in batches:
        assert len(b) <= 5 and len({c.batch_key() for c in b}) == 1
        # both pricings of one (mechanism, behaviour, beta) are in the same batch
        units = {(c.mechanism, c.behaviour, c.beta, c.seed) for c in b}
        assert len(b) == 2 * len(units)
    assert len(make_batches(cells, max_batch=100)) == 2  # one per seed
    assert sum(len(b) for b in make_batches(cells, max_batch=1)) == len(cells)


@pytest.mark.parametrize("mechanism", ["hb", "nphb", "wspt", "wsept"])
def test_shared_schedule_gives_both_pricings_exactly(mechanism):
    """First and k-th price settled on one schedule equal two separate simulations."""
    w = WorkloadSpec(trace=None, synthetic_jobs=600, synthetic_nodes=16, capacity=0.5).build()
    v = true_values(w, "bimodal", 4)
    bid = make_bids("srg", v, draw_shading(w, 4), 0.6)
    both = simulate_pricings(w, mechanism, bid, ["first", "kth"])
    for pricing in ("first", "kth"):
        alone = simulate(w, mechanism, bid, pricing)
        np.testing.assert_array_equal(both[pricing].end_time, alone.end_time)
        np.testing.assert_allclose(both[pricing].payment, alone.payment, rtol=1e-12, atol=1e-9)
    assert not np.allclose(both["first"].payment, both["kth"].payment)  # the two schemes do differ here


def test_shared_schedule_table_equals_separate_runs(tmp_path):
    g = small_grid(seeds=[2], behaviours=["srg"], betas=[0.5])
    a = run_grid(g, tmp_path / "a", executor="serial", progress=False, share_schedule=True)
    b = run_grid(g, tmp_path / "b", executor="serial", progress=False, share_schedule=False)
    assert a.ok and b.ok
    ta, tb = load_results(tmp_path / "a"), load_results(tmp_path / "b")
    pd.testing.assert_frame_equal(ta, tb, check_exact=False, rtol=1e-10)


@pytest.mark.parametrize("kw, match", [
    (dict(mechanisms=["fifo"]), "unknown 'fifo'"),
    (dict(betas=[1.0]), "outside"),
    (dict(capacities=[1.5]), "fraction"),
    (dict(behaviours=[]), "empty"),
    (dict(pricings=["second"]), "unknown 'second'"),
])
def test_bad_grid_raises(kw, match):
    with pytest.raises(ValueError, match=match):
        small_grid(**kw)


def test_rows_sum_to_the_direct_simulation(tmp_path):
    """A cell's rows add up to what the scenario functions give for the same workload, values, bids."""
    res = run_grid(Grid(traces=[TRACE], capacities=[0.5], mechanisms=["nphb"], pricings=["kth"],
                        behaviours=["srg"], betas=[0.7], seeds=[3]), tmp_path, executor="serial", progress=False)
    assert res.ok and res.ran == 1
    df = res.table()
    w = WorkloadSpec(trace=None, synthetic_jobs=400, synthetic_nodes=16, capacity=0.5).build()
    v = true_values(w, "bimodal", 3)
    bid = make_bids("srg", v, draw_shading(w, 3), 0.7)
    jt = job_table(w, simulate(w, "nphb", bid, "kth"), v, bid)
    assert df["jobs_in_group"].sum() == len(w)
    assert df["sum_payment"].sum() == pytest.approx(jt["payment"].sum())
    assert df["sum_utility"].sum() == pytest.approx(jt["utility"].sum())
    assert df["ssj"].sum() == int((jt["bounded_slowdown"] >= 5).sum())
    assert (df["nodes"] == 8).all()
    # the aggressive group holds exactly the SRG draw's 10%
    assert df.loc[df.bidder == "aggressive", "jobs_in_group"].sum() == round(0.1 * len(w))
    c = jt[jt.runtime_group == "C"]
    assert df.loc[df.runtime_group == "C", "sum_bsd"].sum() == pytest.approx(c["bounded_slowdown"].sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cell_rows_equal_rows_grouped_on_the_string_labels(seed):
    """cell_rows sums by the batch's group numbers (found once per batch); the rows (labels,
    sums to the bit, order, dtypes) are those of the plain way: group every cell's jobs on the
    four label columns. Random values on a coarse grid (ties at the band edges 60 and 120),
    random states and payments."""
    from marketsched.analysis.metrics import BSD_FLOOR, SSJ_THRESHOLD, runtime_group, value_band
    from marketsched.engine.records import empty_records
    from marketsched.experiments.runner import GROUP_COLUMNS, SUM_COLUMNS, _groups_static, cell_rows

    rng = np.random.default_rng(seed)
    w = WorkloadSpec(trace=None, synthetic_jobs=300, synthetic_nodes=8).build()
    n = len(w)
    v = rng.choice([0.0, 30.0, 60.0, 90.0, 120.0, 150.0, 200.0], n)
    draws = draw_shading(w, seed)
    bid = make_bids("srg", v, draws, 0.5)
    rec = empty_records(n)
    rec.state[:] = rng.choice([1, 4], n)  # completed or killed
    rec.first_start[:] = w.submit_time + rng.integers(0, 50, n)
    rec.end_time[:] = rec.first_start + w.runtime
    rec.payment[:] = rng.integers(0, 5, n) * 0.1
    cell = Cell(trace=TRACE, seed=seed)
    rows = cell_rows(cell, w, v, bid, rec, _groups_static(w, v, draws, 10.0))

    done = rec.state == 1
    flow = np.where(done, rec.end_time - w.submit_time, 0.0)
    bsd = flow / np.maximum(w.runtime, BSD_FLOOR)
    plain = pd.DataFrame({
        "value_bin": np.minimum(np.floor(np.maximum(v, 0) / 10.0) * 10.0, 180.0), "value_band": value_band(v),
        "runtime_group": runtime_group(w.runtime), "bidder": np.where(draws.aggressive, "aggressive", "conservative"),
        "jobs_in_group": 1, "completed": done.astype(np.int64), "sum_value": v, "sum_bid": bid,
        "sum_runtime": w.runtime, "sum_flow": flow, "sum_wait": np.where(done, rec.first_start - w.submit_time, 0.0),
        "sum_bsd": bsd, "ssj": (done & (bsd >= SSJ_THRESHOLD)).astype(np.int64), "sum_payment": rec.payment,
        "sum_wflow": np.where(done, v * flow, 0.0), "sum_utility": np.where(done, -v * flow - rec.payment, 0.0),
        "preemptions": rec.preemptions,
    }).groupby(list(GROUP_COLUMNS), sort=True, observed=True)[list(SUM_COLUMNS)].sum().reset_index()
    for c in reversed(CELL_COLUMNS):
        plain.insert(0, c, getattr(cell, c))
    plain["nodes"] = int(w.capacity)
    pd.testing.assert_frame_equal(rows, plain, check_exact=True)


def test_resume_skips_finished_cells_and_gives_the_same_table(tmp_path):
    full = small_grid(mechanisms=["hb"])
    first = run_grid(small_grid(seeds=[1], mechanisms=["hb"]), tmp_path / "a", executor="serial", progress=False)
    assert first.ran == 6 and first.skipped == 0
    second = run_grid(full, tmp_path / "a", executor="serial", progress=False)
    assert second.skipped == 6 and second.ran == 6
    again = run_grid(full, tmp_path / "a", executor="serial", progress=False)
    assert again.ran == 0 and again.skipped == 12
    fresh = run_grid(full, tmp_path / "b", executor="serial", progress=False)
    pd.testing.assert_frame_equal(load_results(tmp_path / "a"), load_results(tmp_path / "b"))
    assert len(load_results(tmp_path / "a")[list(CELL_COLUMNS)].drop_duplicates()) == 12
    assert fresh.ok


def test_failing_cell_is_reported_and_loses_nothing(tmp_path):
    good = small_grid(seeds=[1]).cells()
    bad = Cell(trace=TRACE, capacity=0.5, mechanism="hb", pricing="kth", behaviour="srg", beta=1.5, seed=1)
    dead = Cell(trace="/nonexistent/trace.swf", seed=1)  # the whole batch fails
    res = run_grid([good, bad, dead], tmp_path, executor="process", workers=2, max_batch=4, progress=False)
    assert res.ran == len(good)
    assert len(res.failures) == 2
    labels = {f["label"]: f for f in res.failures}
    f_bad = next(f for f in res.failures if f["cell"]["beta"] == 1.5)
    assert "beta_aggressive = 1.5" in f_bad["error"] and f_bad["cell"]["mechanism"] == "hb"
    assert any("nonexistent" in f["error"] for f in labels.values())
    on_disk = json.loads((tmp_path / "failures.json").read_text())
    assert {f["label"] for f in on_disk} == set(labels)
    df = load_results(tmp_path)
    assert len(df[list(CELL_COLUMNS)].drop_duplicates()) == len(good)
    # a rerun retries only the failed cells
    again = run_grid([good, bad], tmp_path, executor="serial", progress=False)
    assert again.skipped == len(good) and again.ran == 0 and len(again.failures) == 1


def test_determinism_across_executors_and_batching(tmp_path):
    g = small_grid(seeds=[5])
    a = run_grid(g, tmp_path / "a", executor="serial", max_batch=100, progress=False)
    b = run_grid(g, tmp_path / "b", executor="process", workers=2, max_batch=3, progress=False)
    assert a.ok and b.ok
    ta, tb = load_results(tmp_path / "a"), load_results(tmp_path / "b")
    pd.testing.assert_frame_equal(ta, tb)
    # common random numbers: every cell of the seed sees the same values and groups
    per_cell = ta.groupby(list(CELL_COLUMNS))[["sum_value", "jobs_in_group"]].sum()
    assert np.allclose(per_cell["sum_value"], per_cell["sum_value"].iloc[0])
    agg = ta[ta.bidder == "aggressive"].groupby(list(CELL_COLUMNS))["jobs_in_group"].sum()
    assert agg.nunique() == 1
    # and a different seed gives different values
    c = run_grid(small_grid(seeds=[6], mechanisms=["hb"], pricings=["kth"], behaviours=["ft"]), tmp_path / "c",
                 executor="serial", progress=False)
    assert not np.isclose(c.table()["sum_value"].sum(), per_cell["sum_value"].iloc[0])


def test_ray_missing_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match="pip install ray"):
        run_grid(small_grid(seeds=[1]), tmp_path, executor="ray", progress=False)


def test_unknown_executor(tmp_path):
    with pytest.raises(ValueError, match="unknown executor"):
        run_grid(small_grid(), tmp_path, executor="dask", progress=False)
