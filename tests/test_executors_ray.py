"""The grid runner on a real Ray cluster joined by its address: a head started here with
``ray start --head`` (its environment without the caller's ``MARKETSCHED_*`` variables, as on
another machine) and stopped at the end whatever happens. Skipped without Ray (optional:
``pip install 'marketsched[ray]'``); ``MARKETSCHED_RAY=1`` makes a missing Ray a failure."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from executor_grids import small_grid
from marketsched.experiments import tasks as T
from marketsched.experiments.runner import Grid, load_results, run_grid
from marketsched.experiments.tasks import Ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _session_pids(sid: int) -> list[int]:
    """The processes of session ``sid`` (the head and everything it started)."""
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if os.getsid(int(d.name)) == sid:
                pids.append(int(d.name))
        except (OSError, ValueError):
            pass
    return pids


@pytest.fixture(scope="module")
def ray_head():
    """The address of a one-node Ray cluster (2 CPUs) started for this module."""
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("MARKETSCHED_RAY") == "1":
            pytest.fail("MARKETSCHED_RAY=1 but Ray is not installed: pip install -e '.[ray]'")
        pytest.skip("Ray is not installed (optional: pip install -e '.[ray]'; MARKETSCHED_RAY=1 makes this a failure)")
    port, temp = _free_port(), tempfile.mkdtemp(prefix="ray-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKETSCHED_") and k != "RAY_ADDRESS"}
    env["MARKETSCHED_CACHE"] = "/proc/no-trace-cache"  # no download can land there: a trace must come from a folder
    # a loopback cluster of the test: no token authentication (Ray 2.5x turns it on for a new
    # cluster when ~/.ray/auth_token exists, which a local ray.init() writes), for head and driver alike
    env["RAY_AUTH_MODE"] = "disabled"
    mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray_cli = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([ray_cli, "status", f"--address={address}"], env=env, capture_output=True).returncode:
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head did not come up on {address} (exit {head.poll()})")
            time.sleep(1)
        yield address
    finally:  # stop the head we started, and only it: every process of its session, by pid
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            pass
        for pid in _session_pids(head.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if head.poll() is None:
            head.wait(10)
        shutil.rmtree(temp, ignore_errors=True)
        if mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = mode


def test_a_grid_on_a_ray_cluster_by_address_gives_the_local_table(ray_head, tmp_path):
    grid = small_grid()
    local = run_grid(grid, tmp_path / "local", executor="process", workers=2, progress=False)
    # workers with an address: at most that many Ray tasks at once (no resource arguments to ray.init)
    on_ray = run_grid(grid, tmp_path / "ray", executor=Ray(address=ray_head), workers=2, max_batch=4, progress=False)
    assert local.ok and on_ray.ok, on_ray.failures[:1]
    assert on_ray.ran == 16
    pd.testing.assert_frame_equal(load_results(tmp_path / "local"), load_results(tmp_path / "ray"))


def test_the_traces_folder_of_the_caller_reaches_the_ray_workers(ray_head, tmp_path, trace_path, monkeypatch):
    lpc = trace_path("LPC-EGEE-2004-1.2-cln")
    monkeypatch.setenv("MARKETSCHED_TRACES", str(lpc.parent))  # the head was started without it
    monkeypatch.setenv("RAY_ADDRESS", ray_head)  # the other way to name the cluster
    grid = Grid(traces=["LPC-EGEE-2004-1.2-cln"], jobs=300, split=True, capacities=[0.5], mechanisms=["hb"],
                pricings=["kth"], behaviours=["ft"], seeds=[1])
    monkeypatch.setattr(T, "shipped_env", dict)  # as before: the caller's variables stay behind
    lost = run_grid(grid, tmp_path / "ray", executor="ray", progress=False)
    assert lost.ran == 0 and [f["label"] for f in lost.failures] == [grid.cells()[0].label()]
    assert "no-trace-cache" in lost.failures[0]["error"]  # not in a traces folder: the worker went for its cache
    monkeypatch.undo()
    monkeypatch.setenv("MARKETSCHED_TRACES", str(lpc.parent))
    monkeypatch.setenv("RAY_ADDRESS", ray_head)
    on_ray = run_grid(grid, tmp_path / "ray", executor="ray", progress=False)
    assert on_ray.ok and on_ray.ran == 1, on_ray.failures[:1]
    assert run_grid(grid, tmp_path / "local", executor="serial", progress=False).ok
    pd.testing.assert_frame_equal(load_results(tmp_path / "local"), load_results(tmp_path / "ray"))


def test_a_failed_task_on_ray_is_named_with_its_worker_traceback(ray_head, tmp_path):
    from marketsched.experiments.runner import make_batches

    tasks = [T.Task(("batches", n), make_batches, ([], n)) for n in (1, 0, 2)]  # max_batch = 0 raises
    with pytest.raises(T.TasksFailed, match=r"1 of 3 .*\('batches', 0\): ValueError: max_batch = 0 must be >= 1"):
        T.run_tasks(tasks, tmp_path, executor=Ray(address=ray_head), progress=False)
    import json

    failure = json.loads((tmp_path / "failures.json").read_text())[0]
    assert "in make_batches" in failure["traceback"]  # the worker's traceback, not only the message
    assert T.run_tasks(tasks[:1] + tasks[2:], tmp_path, executor="serial", progress=False).skipped == 2
