"""Shared fixtures.

``trace_path(name)``: the path of a real archive trace in the folder named by
``MARKETSCHED_TRACES`` (CI sets it to the shared traces folder). Unset variable: the test is
skipped. Set but the file missing: the test fails (a CI set-up error must not pass silently).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Read once at start-up, so tests that clear the variable (to isolate the registry from the
# developer's set-up) do not hide the shared traces from trace-based tests.
TRACES_FOLDER = os.environ.get("MARKETSCHED_TRACES")


@pytest.fixture
def trace_path():
    def get(name: str) -> Path:
        folder = TRACES_FOLDER
        if not folder:
            pytest.skip("MARKETSCHED_TRACES is not set: trace-based test skipped")
        base = name if name.endswith((".swf", ".gz")) else f"{name}.swf.gz"
        path = Path(folder).expanduser() / base
        if not path.is_file():
            pytest.fail(f"MARKETSCHED_TRACES={folder} is set but {base} is not there")
        return path

    return get


@pytest.fixture(scope="module")
def cluster():
    """A running Slurm cluster (``scripts/slurm-up.sh``). Missing: skip, or fail when
    ``MARKETSCHED_SLURM=1`` (as CI sets it, so Slurm tests never skip silently there)."""
    from marketsched.live.slurm import slurm_up

    if not slurm_up():
        if os.environ.get("MARKETSCHED_SLURM") == "1":
            pytest.fail("MARKETSCHED_SLURM=1 but Slurm does not answer (sinfo): run `bash scripts/slurm-up.sh`")
        pytest.skip("no Slurm cluster (run `bash scripts/slurm-up.sh`; MARKETSCHED_SLURM=1 makes this a failure)")
    return True
