"""A third-party mechanism registered through the entry-point group ``marketsched.mechanisms``.

The test writes a tiny package in tmp_path ("lowest bid first", a serial non-preemptive queue
that charges nothing) as a wheel (a zip with the module and its ``.dist-info``: no build
backend needed, so the test needs no network and no ``wheel`` package), installs it with pip (no
index, no dependencies) into a folder of its own on the path of this test and of the commands it
starts (other tests running at the same time do not see it), runs it through the command line
(a fresh process, so the entry point is found as a user's shell would find it) and through the
grid runner, and uninstalls it whatever happens.
"""

import contextlib
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = "marketsched-lowest-bid-plugin"

MODULE = textwrap.dedent('''
    import heapq

    from marketsched.mechanisms.registry import Mechanism


    class LowestBidFirst:
        def __init__(self, bid):
            self.bid = bid.tolist()

        def bind(self, sim):
            self.sim, self.queue = sim, []

        def step(self, t, arrived, completed):
            for j in arrived:
                heapq.heappush(self.queue, (self.bid[j], j))
            while self.sim.free and self.queue:
                self.sim.start(heapq.heappop(self.queue)[1])


    MECHANISM = Mechanism("lowest-bid", "Lowest bid first", "queue", "a test plugin",
                          lambda jobs: LowestBidFirst(jobs.bid), needs=("bids", "serial"), market=False)
''')

ENTRY_POINTS = textwrap.dedent('''
    [marketsched.mechanisms]
    lowest-bid = ms_lowest_bid:MECHANISM
''')


def build_wheel(folder: Path, name: str = PLUGIN, modules: dict | None = None, entry_points: str = ENTRY_POINTS,
                version: str = "0.1") -> Path:
    """A plugin (default: this file's) as a pure-Python wheel (PEP 427), written by hand; ``modules``:
    file name -> source."""
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        **(modules or {"ms_lowest_bid.py": MODULE}),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: marketsched-test\nRoot-Is-Purelib: true\n"
                                   "Tag: py3-none-any\n",
        f"{dist}.dist-info/entry_points.txt": entry_points,
    }
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{dist}.dist-info/RECORD"])
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _pip(*args):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)


@contextlib.contextmanager
def installed(wheel: Path, name: str):
    """The wheel installed for the block into a folder of its own on this process's ``sys.path``
    and on the ``PYTHONPATH`` of the commands it starts (found there as in site-packages: by its
    ``.dist-info``), and removed whatever happens. Not into the shared environment: tests that
    list every mechanism in other pytest-xdist workers at the same time must not see it."""
    import os
    import shutil
    import tempfile

    target = tempfile.mkdtemp(prefix=f"{name}-")
    r = _pip("install", "-q", "--no-index", "--no-deps", "--target", target, str(wheel))
    assert r.returncode == 0, r.stderr
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([target, *([before] if before else [])])
    sys.path.insert(0, target)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(target)
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
        shutil.rmtree(target, ignore_errors=True)
        importlib.invalidate_caches()
        from marketsched.mechanisms import registry

        registry.load_plugins(reload=True)


@pytest.fixture
def installed_plugin(tmp_path):
    with installed(build_wheel(tmp_path), PLUGIN):
        yield


def _cli(*args):
    exe = Path(sys.executable).with_name("marketsched")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)


def test_plugin_through_cli_and_runner(installed_plugin, tmp_path):
    r = _cli("mechanisms")
    assert r.returncode == 0, r.stderr
    assert "lowest-bid *" in r.stdout  # listed, marked as a plugin
    r = _cli("mechanisms", "lowest-bid")
    assert "plugin marketsched-lowest-bid-plugin" in r.stdout and "serial" in r.stdout
    out = tmp_path / "low.parquet"
    r = _cli("simulate", "--mechanism", "lowest-bid", "--synthetic-jobs", "300", "--synthetic-nodes", "8",
             "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "lowest-bid" in r.stdout
    from marketsched.results import read, rerun

    table, meta = read(out)
    assert meta["runs"] == [{"label": "lowest-bid", "mechanism": "lowest-bid", "params": {}, "engine": "python"}]
    assert meta["plugins"] == {"lowest-bid": {"distribution": PLUGIN, "version": "0.1"}}
    assert (table["state"] == "completed").all() and (table["payment"] == 0).all()
    # the queue really is lowest bid first: among jobs waiting when one starts, none bid less
    start = table["wait_time"] + table["submit_time"]
    for i in range(len(table)):
        waiting = (table["submit_time"] <= start[i]) & (start > start[i])
        assert not (waiting & (table["bid"] < table["bid"][i])).any()
    assert rerun(meta).equals(table)
    r = _cli("compare", "--mechanisms", "lowest-bid,hb", "--synthetic-jobs", "200", "--synthetic-nodes", "8")
    assert r.returncode == 0, r.stderr
    assert "lowest-bid" in r.stdout and "hb/kth" in r.stdout
    # the grid runner, in this process (plugins re-read)
    from marketsched.experiments.runner import Grid, run_grid
    from marketsched.mechanisms import registry

    assert "lowest-bid" in registry.load_plugins(reload=True)
    res = run_grid(Grid(traces=["synthetic:200:8"], mechanisms=["lowest-bid", "fcfs"]), tmp_path / "grid",
                   executor="serial", progress=False)
    assert res.ok, res.failures
    t = res.table()
    assert set(t["mechanism"]) == {"lowest-bid", "fcfs"} and set(t["pricing"]) == {"-"}
    assert t.groupby("mechanism")["completed"].sum().tolist() == [200, 200]
