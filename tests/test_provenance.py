"""Provenance in every result file (single runs, grid parts, task stores) and `marketsched rerun`."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from marketsched import results
from marketsched.cli import main
from marketsched.experiments.runner import Grid, load_results, run_grid
from marketsched.experiments.tasks import PROVENANCE, Task, run_tasks
from marketsched.scenario import Scenario, WorkloadSpec, run
from marketsched.workloads.registry import sha256_file
from marketsched.workloads.swf import SWF_FIELDS, write_swf

SOFTWARE = ("marketsched", "revision", "engine", "plugins")


def _small_swf(path, n=60, seed=3):
    rng = np.random.default_rng(seed)
    cols = {f: np.full(n, -1) for f in SWF_FIELDS}
    cols["job_number"] = np.arange(1, n + 1)
    cols["submit_time"] = np.cumsum(rng.integers(0, 40, n))
    cols["run_time"] = rng.integers(1, 300, n)
    cols["requested_procs"] = rng.integers(1, 4, n)
    cols["requested_time"] = cols["run_time"] * 2
    return write_swf(cols, path, header={"MaxProcs": "4"})


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_single_run_file_records_its_provenance_and_reruns_identical(tmp_path):
    trace = _small_swf(tmp_path / "t.swf")
    out = tmp_path / "r.parquet"
    r = _invoke("simulate", "--trace", trace, "--split", "--mechanism", "hb", "--estimates", "exact", "--out", out)
    assert r.exit_code == 0, r.output
    table, meta = results.read(out)
    for key in SOFTWARE:
        assert key in meta
    assert meta["marketsched"] == results.version()
    assert meta["engine"] in ("compiled", "python") and meta["runs"][0]["engine"] in ("compiled", "python")
    w = meta["scenario"]["workload"]
    assert w["trace_file"] == "t.swf" and len(w["trace_sha256"]) == 64 and w["split"] and w["estimates"] == "exact"
    assert meta["scenario"]["seed"] == 1 and meta["scenario"]["values"] == "bimodal"
    r = _invoke("rerun", out)
    assert r.exit_code == 0, r.output
    assert "r.parquet: identical" in r.output


def test_rerun_says_different_when_the_table_was_changed(tmp_path):
    out = tmp_path / "r.parquet"
    assert _invoke("simulate", "--synthetic-jobs", "100", "--synthetic-nodes", "4", "--out", out).exit_code == 0
    table, meta = results.read(out)
    table.loc[5, "payment"] += 1.0
    results.write(table, out, meta)
    r = _invoke("rerun", out)
    assert r.exit_code == 1
    assert "DIFFERENT" in r.output and "column 'payment' first differs at row 5" in r.output


def test_rerun_refuses_a_changed_trace(tmp_path):
    trace = _small_swf(tmp_path / "t.swf")
    out = tmp_path / "r.csv"
    assert _invoke("simulate", "--trace", trace, "--split", "--out", out).exit_code == 0
    _small_swf(trace, seed=4)
    r = _invoke("rerun", out)
    assert r.exit_code == 2 and "sha256" in r.output and "Traceback" not in r.output


def test_grid_part_carries_provenance_and_reruns_identical(tmp_path):
    trace = str(_small_swf(tmp_path / "t.swf"))
    grid = Grid(traces=[trace, "synthetic:80:4"], split=True, mechanisms=["hb", "easy"], pricings=["kth", "first"],
                seeds=[1, 2], estimates="exact", deadlines="slack:factor=5")
    res = run_grid(grid, tmp_path / "out", executor="serial", progress=False, max_batch=2)
    assert res.ok
    parts = sorted((tmp_path / "out").glob("part-*.parquet"))
    assert len(parts) > 1
    cells = 0
    for part in parts:
        table, meta = results.read(part)
        assert meta["kind"] == "grid part"
        for key in SOFTWARE:
            assert key in meta
        assert meta["engine"] in ("compiled", "python")
        for c in meta["cells"]:
            assert c["estimates"] == "exact" and c["deadlines"] == "slack:factor=5" and c["split"]
            if c["trace"] == trace:
                assert meta["traces"][trace] == {"file": "t.swf", "sha256": sha256_file(trace)}
        got = table[["trace", "mechanism", "pricing", "seed"]].drop_duplicates()
        assert len(got) == len(meta["cells"])
        cells += len(meta["cells"])
        [(name, ok, detail)] = results.rerun_path(part)
        assert ok, detail
    assert cells == len(grid.cells())
    r = _invoke("rerun", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert f"{len(parts)} of {len(parts)} identical" in r.output


def test_a_changed_grid_part_is_found_different(tmp_path):
    res = run_grid(Grid(traces=["synthetic:60:4"], mechanisms=["easy"], seeds=[1]), tmp_path / "out",
                   executor="serial", progress=False)
    assert res.ok
    [part] = (tmp_path / "out").glob("part-*.parquet")
    table, meta = results.read(part)
    table.loc[0, "sum_flow"] *= 2
    results.write_parquet(table, part, meta)
    [(_, ok, detail)] = results.rerun_path(part)
    assert not ok and "sum_flow" in detail
    assert load_results(tmp_path / "out")["sum_flow"].iloc[0] == table["sum_flow"].iloc[0]


def one_run(seed: int, mechanism: str):
    """A reproduction-like task: a per-job table of one run."""
    jobs = Scenario(WorkloadSpec(synthetic_jobs=80, synthetic_nodes=4), seed=seed).build()
    return {"table": results.job_table_of(jobs, run(jobs, mechanism)), "seed": seed, "mean": float(jobs.bid.mean())}


def test_task_store_carries_provenance_and_reruns_identical(tmp_path):
    store = tmp_path / "tasks"
    tasks = [Task((m, s), one_run, (s, m)) for m in ("hb", "easy") for s in (1, 2)]
    run_tasks(tasks[:2], store, executor="serial", progress=False)
    run_tasks(tasks, store, executor="serial", progress=False)  # resumed: two more
    doc = json.loads((store / PROVENANCE).read_text())
    assert doc["kind"] == "task store" and len(doc["tasks"]) == 4
    for entry in doc["tasks"].values():
        assert entry["function"].endswith("one_run")
        for key in SOFTWARE:
            assert key in entry
    r = _invoke("rerun", store)
    assert r.exit_code == 0, r.output
    assert "4 of 4 identical" in r.output
    # a stored result changed: found
    t = tasks[3]
    path = store / f"{t.name()}.pkl"
    key, value, call = pickle.loads(path.read_bytes())
    value["table"].loc[0, "payment"] += 1
    path.write_bytes(pickle.dumps((key, value, call)))
    r = _invoke("rerun", store)
    assert r.exit_code == 1 and "DIFFERENT" in r.output and "3 of 4 identical" in r.output


@pytest.mark.parametrize("a, b, equal", [
    (1.0, 1.0, True), (float("nan"), float("nan"), True), (0.1 + 0.2, 0.3, False),
    (np.array([1.0, np.nan]), np.array([1.0, np.nan]), True), (np.array([1, 2]), np.array([1.0, 2.0]), False),
    ({"a": [1, (2, 3)]}, {"a": [1, (2, 3)]}, True), ({"a": 1, "b": 2}, {"b": 2, "a": 1}, False),
    (pd.DataFrame({"x": [1.0]}), pd.DataFrame({"x": [1.0]}), True), (pd.DataFrame({"x": [1]}), pd.DataFrame({"x": [1.0]}), False),
])
def test_same_is_exact(a, b, equal):
    assert results.same(a, b) is equal


def test_rerun_of_something_else_says_why(tmp_path):
    (tmp_path / "x.csv").write_text("a\n1\n")
    r = _invoke("rerun", tmp_path / "x.csv")
    assert r.exit_code == 2 and "metadata file x.csv.meta.json is missing" in r.output
    r = _invoke("rerun", tmp_path)
    assert r.exit_code == 2 and "neither a task store" in r.output


def test_same_leaves_out_only_what_it_is_told():
    a = {"wall_s": 1.0, "table": pd.DataFrame({"x": [1], "cpu_seconds": [0.5]}), "n": 3}
    b = {"wall_s": 2.0, "table": pd.DataFrame({"x": [1], "cpu_seconds": [0.7]}), "n": 3}
    assert not results.same(a, b) and results.same(a, b, results.VOLATILE)
    assert not results.same(a, {**b, "n": 4}, results.VOLATILE)


def test_volatile_names_exactly_the_timing_values_and_keeps_quantities_with_units():
    """A value whose name merely carries a unit (``_s``, ``_ms``, ``_cpu``) is compared; only the
    named timing, load and execution values are left out, at any depth."""
    timing = {"wall_s": 1.0, "schedule_s": 0.2, "seconds": 3.0, "load_average": 1.5, "workers": 2,
              "table": pd.DataFrame({"x": [1], "dlgm_cpu_s": [0.5], "mip_cpu_ms": [7.0]})}
    other = {"wall_s": 2.0, "schedule_s": 0.3, "seconds": 4.0, "load_average": 0.1, "workers": 1,
             "table": pd.DataFrame({"x": [1], "dlgm_cpu_s": [0.9], "mip_cpu_ms": [9.0]})}
    kept = {"mean_wait_s": 12.5, "brute_cap_s": 60.0, "thesis_ms": 40.0, "job_cpu": 2, "num_cpus": 4}
    assert results.same({**timing, **kept}, {**other, **kept}, results.VOLATILE)
    for name, value in kept.items():
        assert not results.same({**timing, **kept}, {**other, **kept, name: value + 1}, results.VOLATILE), name
    assert not results.same({"t": pd.DataFrame({"mean_wait_s": [1.0]})}, {"t": pd.DataFrame({"mean_wait_s": [2.0]})},
                            results.VOLATILE)


def test_every_timing_name_the_reproductions_write_is_volatile():
    """The names the reproductions give their values (dict keys, aggregate columns, assigned
    columns: string constants in ``marketsched.experiments``) that look like a time, a load or an
    execution setting are either left out of ``rerun`` or named here as real quantities."""
    import ast
    import re
    from pathlib import Path

    import marketsched.experiments as ex

    looks = re.compile(r"seconds|_s$|_ms$|_cpu|wall|minutes|load_|mip_limit|workers|executor")
    real = {"brute_cap_s", "thesis_ms", "thesis_k_ms", "thesis_cv_ms", "num_cpus"}  # config, published figures
    names = set()
    for path in Path(ex.__file__).parent.glob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Dict):
                names |= {k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            elif isinstance(n, ast.Call) and ast.unparse(n.func).endswith(("dict", "agg", "assign")):
                names |= {kw.arg for kw in n.keywords if kw.arg}
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.slice, ast.Constant):
                names.add(str(n.slice.value))
    candidates = {k for k in names if looks.search(k)}
    assert {"wall_s", "schedule_s", "mip_cpu_ms", "load_average"} <= candidates  # the scan sees the reproductions
    assert sorted(candidates - real - results.VOLATILE_NAMES) == []
    assert not real & results.VOLATILE_NAMES


@pytest.mark.reproduce
def test_a_reproduction_store_reruns_identical(tmp_path):
    """A real reproduction's smallest grid (Mutz (2008) on a trace, synthetic in --quick)."""
    from marketsched.experiments import mutz_trace

    mutz_trace.run(tmp_path / "out", quick=True, seeds=1, executor="serial")
    doc = json.loads((tmp_path / "out" / "tasks" / PROVENANCE).read_text())
    assert len(doc["tasks"]) == len(list((tmp_path / "out" / "tasks").glob("*.pkl")))
    r = _invoke("rerun", tmp_path / "out" / "tasks")
    assert r.exit_code == 0, r.output
    n = len(doc["tasks"])
    assert f"{n} of {n} identical" in r.output
