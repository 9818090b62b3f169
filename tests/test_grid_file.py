"""Grid files (marketsched.experiments.grid; `marketsched grid show/run`): checked, expanded,
run on the process executor with a plugin mechanism, equal to the serial table, resumed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from grid_files import SWEEP_PLUGIN, sweep_file, sweep_wheel
from marketsched.cli import main
from marketsched.experiments.grid import GridFileError, load, summary
from marketsched.experiments.runner import load_results
from test_plugin import installed


def _cli(*args):
    exe = Path(sys.executable).with_name("marketsched")
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=600)


def test_a_plugin_swept_over_two_traces_two_parameters_three_seeds_on_processes(tmp_path):
    with installed(sweep_wheel(tmp_path), SWEEP_PLUGIN):
        path = sweep_file(tmp_path / "exp")
        r = _cli("grid", "show", path)
        assert r.returncode == 0, r.stderr
        assert "12 cells, 0 already in" in r.stdout and f"weighted-bid from {SWEEP_PLUGIN} 0.3" in r.stdout
        assert r.stdout.count("weighted-bid(alpha=50.0)") == 6
        r = _cli("grid", "run", path)  # the file says: process executor, 2 workers
        assert r.returncode == 0, r.stderr
        assert "ran 12, already done 0, failed 0 of 12 cells" in r.stderr
        r2 = _cli("grid", "run", path, "--executor", "serial", "--out", tmp_path / "serial")
        assert r2.returncode == 0, r2.stderr
        processes, serial = load_results(tmp_path / "exp" / "results"), load_results(tmp_path / "serial")
        pd.testing.assert_frame_equal(processes, serial)
        cells = processes.drop_duplicates(["trace", "params", "seed"])
        assert len(cells) == 12 and set(cells["params"]) == {"alpha=0.0", "alpha=50.0"}
        assert {Path(t).name for t in cells["trace"]} == {"a.swf", "b.swf"}
        s = pd.read_csv(tmp_path / "exp" / "results" / "summary.csv")
        assert len(s) == 12 and list(s.columns[-3:]) == ["completed", "mean_wait", "mean_bsd"]
        by_alpha = s.groupby("params")["mean_wait"].mean()
        assert by_alpha["alpha=0.0"] != by_alpha["alpha=50.0"]  # the parameter reached the plugin
        # resumed: nothing left to run; the parts rerun identical, with the plugin's provenance
        r = _cli("grid", "run", path)
        assert r.returncode == 0 and "ran 0, already done 12" in r.stderr
        r = _cli("rerun", tmp_path / "exp" / "results")
        assert r.returncode == 0, r.stdout + r.stderr
        from marketsched.results import read

        part = next((tmp_path / "exp" / "results").glob("part-*.parquet"))
        assert read(part)[1]["plugins"] == {"weighted-bid": {"distribution": SWEEP_PLUGIN, "version": "0.3"}}


GOOD = '''
seeds = [1, 2]
behaviours = ["ft", "srg"]
betas = [0.5, 0.9]
[[workloads]]
trace = "synthetic:50:4"
capacity = [1.0, 0.5]
[[mechanisms]]
name = "hb"
pricing = ["kth", "first"]
[[mechanisms]]
name = "easy"
'''


def test_expansion_is_the_cartesian_product(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(GOOD)
    g = load(path)
    # capacities 2 x seeds 2 x (hb 2 pricings + easy 1) x (ft + srg at 2 betas)
    assert len(g.cells) == 2 * 2 * 3 * 3
    assert {c.pricing for c in g.cells if c.mechanism == "easy"} == {"-"}
    assert {c.beta for c in g.cells if c.behaviour == "ft"} == {0.0}
    assert g.out == tmp_path / "g" and g.executor == "process"


def test_grid_run_serial_in_process_and_summary(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text(GOOD.replace("seeds = [1, 2]", 'seeds = [1]\nexecutor = "serial"'))
    r = CliRunner().invoke(main, ["grid", "run", str(path)])
    assert r.exit_code == 0, r.output
    table = load_results(tmp_path / "g")
    s = summary(table, ("completed", "mean_flow", "revenue"))
    assert len(s) == len(load(path).cells)
    one = table[(table["mechanism"] == "easy") & (table["capacity"] == 1.0)]
    assert s[(s["mechanism"] == "easy") & (s["capacity"] == 1.0)]["mean_flow"].iloc[0] == pytest.approx(
        one["sum_flow"].sum() / one["completed"].sum())


@pytest.mark.parametrize("text, message", [
    ("seeds = [1]\n", "no [[workloads]]"),
    ('[[workloads]]\ntrace = "synthetic:10:2"\n', "no [[mechanisms]]"),
    ('colour = "red"\n' + GOOD, "unknown key colour"),
    (GOOD.replace('name = "easy"', 'name = "nope"'), "unknown mechanism 'nope'"),
    (GOOD.replace('name = "easy"', 'name = "easy"\npricing = ["kth"]'), "'easy': has no pricing parameter"),
    (GOOD.replace('name = "easy"', 'name = "easy"\nparams = { speed = [1, 2] }'), "speed"),
    (GOOD.replace("capacity = [1.0, 0.5]", "capacity = [1.5]"), "capacity must be fractions"),
    (GOOD.replace("seeds = [1, 2]", 'seeds = ["one"]'), "seeds: 'one' is not a whole number"),
    (GOOD.replace('trace = "synthetic:50:4"', 'trace = "synthetic:50:4"\ndeadlines = "soon"'), "deadlines"),
    ('executor = "cloud"\n' + GOOD, "executor: unknown 'cloud'"),
    ("seeds = [1\n", "not TOML"),
])
def test_bad_grid_file_names_the_problem(tmp_path, text, message):
    path = tmp_path / "g.toml"
    path.write_text(text)
    with pytest.raises(GridFileError, match=None) as exc:
        load(path)
    assert message in str(exc.value) and str(path) in str(exc.value)
    r = CliRunner().invoke(main, ["grid", "show", str(path)])
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output


def test_example_in_the_docs_loads(tmp_path, monkeypatch):
    """docs/grids.md's example file, as written there, with the tutorial's mechanism registered."""
    from marketsched.mechanisms import registry

    edf = registry.Mechanism("edf", "test stand-in", "priority market", "docs/extending.md", lambda jobs, surcharge: None,
                             params=(registry.Param("surcharge", float, 0.0, "surcharge"),), needs=("bids", "serial"))
    monkeypatch.setitem(registry._REGISTRY, "edf", edf)
    doc = (Path(__file__).parents[1] / "docs" / "grids.md").read_text()
    path = tmp_path / "sweep.toml"
    path.write_text(doc.split("```toml\n", 1)[1].split("```", 1)[0])
    g = load(path)
    assert len(g.cells) == 36 and g.out == tmp_path / "results" and g.workers == 2
    assert g.cells[0].label() == "SDSC-SP2-1998-4.2-cln cap=1 split jobs=2000 edf(surcharge=0.5) ft beta=0 seed=1"
    assert g.cells[-1].label() == "synthetic:3000:64 cap=1 hb/first ft beta=0 seed=3"


def test_grid_run_prints_counts_whole_and_every_job_as_all(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('executor = "serial"\nmetrics = ["completed", "mean_bsd"]\n'
                    '[[workloads]]\ntrace = "synthetic:1500:8"\n'
                    '[[workloads]]\ntrace = "synthetic:1500:8"\njobs = 1200\n'
                    '[[mechanisms]]\nname = "easy"\n')
    r = CliRunner().invoke(main, ["grid", "run", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split() == ["jobs", "completed", "mean_bsd"])
    rows = [line.split() for line in lines[head + 1: head + 3]]
    assert [row[:2] for row in rows] == [["all", "1,500"], ["1,200", "1,200"]], r.output  # not 0, not 1.5e+03
