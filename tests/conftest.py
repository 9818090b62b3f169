"""Shared fixtures, and the markers given by file.

Markers (declared in pyproject.toml): ``live`` marks every test of the live market's files
(real processes, servers, a browser, Slurm: ``test_live_*``, ``test_slurm_*``,
``test_dayahead*``, ``test_tycoon_live``); ``slurm`` marks tests that use the ``cluster``
fixture. ``pytest -m "not live"`` is the library alone (CI runs it on the other interpreters).

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


LIVE_FILES = ("test_live_", "test_slurm_", "test_dayahead", "test_tycoon_live")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name.startswith(LIVE_FILES):
            item.add_marker(pytest.mark.live)
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)


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
