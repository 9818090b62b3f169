"""Inputs checked before an experiment starts (``marketsched.experiments.inputs``): a
reproduction or grid whose traces are missing refuses with one message naming every missing
trace and how to get it, before any task starts; offline, one download is tried, not one per
trace."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error

import pytest

from marketsched.experiments import inputs
from marketsched.experiments.runner import Cell, run_grid
from marketsched.workloads import registry

CH5 = ["HPC2N-2002-2.2-cln", "SDSC-SP2-1998-4.2-cln", "LPC-EGEE-2004-1.2-cln", "KTH-SP2-1996-2.1-cln"]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No trace folder, an empty cache, and every download refused; returns the downloads tried."""
    tried = []

    def refuse(url, dest, progress=True):
        tried.append(url)
        raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

    (tmp_path / "traces").mkdir()
    monkeypatch.setenv("MARKETSCHED_TRACES", str(tmp_path / "traces"))
    monkeypatch.setenv("MARKETSCHED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_fetch", refuse)
    return tried


def test_traces_in_finds_the_known_names_in_nested_arguments():
    args = [("run", "LPC-EGEE-2004-1.2-cln", 0.75), {"job": {"trace": "kth-sp2-1996-2.1-cln.swf.gz"}},
            [Cell(trace="SDSC-SP2-1998-4.2-cln")], ("synthetic:100:8", "uniform", "/no/such.swf"),
            ("LPC-EGEE-2004-1.2-cln",)]
    assert inputs.traces_in(args) == ["LPC-EGEE-2004-1.2-cln", "KTH-SP2-1996-2.1-cln", "SDSC-SP2-1998-4.2-cln"]


def test_offline_every_missing_trace_is_named_once_after_one_download(offline):
    with pytest.raises(inputs.MissingInputs) as err:
        inputs.check_traces(CH5)
    assert len(offline) == 1  # the first download failed: the others are not tried
    text = str(err.value)
    for name in CH5:
        assert text.count(f"  {name}: ") == 1, name
    assert "Connection refused" in text and "marketsched traces fetch NAME" in text and "MARKETSCHED_TRACES" in text


def test_a_grid_with_a_missing_trace_runs_no_cell(offline, tmp_path):
    cells = [Cell(trace="LPC-EGEE-2004-1.2-cln", jobs=50, split=True), Cell(trace="synthetic:50:4")]
    with pytest.raises(inputs.MissingInputs, match="LPC-EGEE-2004-1.2-cln"):
        run_grid(cells, tmp_path / "out", executor="serial", progress=False)
    assert not list((tmp_path / "out").glob("*.parquet")) and not list((tmp_path / "out").rglob("part*"))


def test_offline_reproduction_refuses_at_once_with_one_message(tmp_path):
    """`marketsched reproduce stoesser-ch5` with an empty traces folder and cache, every
    download refused (a proxy on a closed port): exit 1, one message naming the four traces,
    and no task stored or started."""
    (tmp_path / "traces").mkdir()
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "https_proxy", "http_proxy")}
    env.update(MARKETSCHED_TRACES=str(tmp_path / "traces"), MARKETSCHED_CACHE=str(tmp_path / "cache"),
               https_proxy="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    out = tmp_path / "ch5"
    p = subprocess.run([sys.executable, "-m", "marketsched.cli", "reproduce", "stoesser-ch5", "--quick", "--out",
                        str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stderr.count("Error:") == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("Error: nothing started:\n4 trace(s)")
    for name in CH5:
        assert p.stderr.count(f"  {name}: ") == 1, name
    assert not list(out.rglob("*.pkl")) and not (out / "tasks" / "failures.json").exists()


def test_a_grid_names_every_mechanism_and_trace_it_cannot_run_in_one_message(offline, tmp_path):
    cells = [Cell(trace="synthetic:50:4", mechanism="lbf"), Cell(trace="synthetic:50:4", mechanism="lbf", seed=2),
             Cell(trace="synthetic:50:4", mechanism="dlgm", pricing="-", params="speed=3"),
             Cell(trace="KTH-SP2-1996-2.1-cln", jobs=50, split=True)]
    with pytest.raises(inputs.MissingInputs) as err:
        run_grid(cells, tmp_path / "out", executor="serial", progress=False)
    text = str(err.value)
    assert text.count("  lbf: unknown mechanism 'lbf'") == 1
    assert "  dlgm: mechanism 'dlgm' has no parameter 'speed'" in text
    assert "  KTH-SP2-1996-2.1-cln: " in text and "2 mechanism(s)" in text and "1 trace(s)" in text
