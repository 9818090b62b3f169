"""A grid file sweeping a plugin mechanism as a Slurm job array (live: the one-host CI cluster):
the same table as in this process, cell by cell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from grid_files import SWEEP_PLUGIN, sweep_file, sweep_wheel
from marketsched.experiments.runner import load_results
from test_plugin import installed

pytestmark = pytest.mark.usefixtures("cluster")


def test_a_plugin_sweep_on_slurm_gives_the_serial_table(tmp_path):
    exe = Path(sys.executable).with_name("marketsched")
    with installed(sweep_wheel(tmp_path), SWEEP_PLUGIN):
        path = sweep_file(tmp_path / "exp", executor="slurm")
        r = subprocess.run([str(exe), "grid", "run", str(path)], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        assert "ran 12, already done 0, failed 0 of 12 cells" in r.stderr
        r = subprocess.run([str(exe), "grid", "run", str(path), "--executor", "serial", "--out", str(tmp_path / "s")],
                           capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr
        slurm = load_results(tmp_path / "exp" / "results")
        assert len(slurm.drop_duplicates(["trace", "params", "seed"])) == 12
        pd.testing.assert_frame_equal(slurm, load_results(tmp_path / "s"))
