"""Local executor with real processes: own process group and folder, SIGSTOP/SIGCONT, exit
codes, cancel kills the group, re-attachment by pid + start time."""

import os
import signal
import time

import pytest

from marketsched.live.executor import LocalExecutor, proc_start_ticks


def proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def wait_exits(ex, n=1, timeout=10.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        ex.wait(0.2)
        got += ex.exits()
    return got


@pytest.fixture
def ex(tmp_path):
    e = LocalExecutor(tmp_path / "jobs")
    yield e
    e.shutdown(kill=True)


def test_runs_in_own_group_and_folder_with_output_and_exit_code(ex):
    p = ex.launch(1, "echo hello; echo oops >&2; pwd; exit 3")
    assert os.getpgid(p.pid) == p.pid != os.getpgid(0)
    assert os.getsid(p.pid) == p.pid
    assert wait_exits(ex) == [(1, 3)]
    assert (p.workdir / "stdout").read_text().splitlines() == ["hello", str(p.workdir)]
    assert (p.workdir / "stderr").read_text() == "oops\n"
    assert 1 not in ex.procs


def test_stop_and_continue_the_whole_group(ex, tmp_path):
    # the command starts a child (same group) that counts; both must stop and continue
    p = ex.launch(2, "sh -c 'i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $i >> count; sleep 0.01; done'")
    time.sleep(0.3)
    assert ex.stop(2)
    time.sleep(0.1)
    assert proc_state(p.pid) == "T"
    c1 = (p.workdir / "count").read_text()
    time.sleep(0.3)
    assert (p.workdir / "count").read_text() == c1  # nothing in the group ran while stopped
    assert ex.exits() == []
    assert ex.cont(2)
    time.sleep(0.3)
    assert len((p.workdir / "count").read_text()) > len(c1) > 0
    ex.kill(2)


def test_cancel_kills_group_including_grandchildren(ex):
    p = ex.launch(3, "sleep 30 & echo $! > child; wait")
    deadline = time.monotonic() + 5
    while not (p.workdir / "child").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int((p.workdir / "child").read_text())
    ex.stop(3)
    ex.kill(3)  # works on a stopped group too
    time.sleep(0.2)
    assert proc_start_ticks(p.pid) is None
    assert proc_start_ticks(child) is None
    assert 3 not in ex.procs


def test_exit_by_signal_is_reported(ex):
    ex.launch(4, "kill -TERM $$")
    assert wait_exits(ex) == [(4, 128 + signal.SIGTERM)]


def test_reattach_by_pid_and_start_time(tmp_path):
    ex1 = LocalExecutor(tmp_path / "jobs")
    p = ex1.launch(5, "sleep 0.6; exit 7")
    ex1.stop(5)
    ex1.shutdown(kill=False)  # as after a crash: the process lives on, stopped
    ex2 = LocalExecutor(tmp_path / "jobs")
    try:
        assert ex2.adopt(5, p.pid, p.start_ticks + 1, p.workdir) is None  # start time differs: not ours
        assert ex2.adopt(6, 999_999_999, 0, p.workdir) is None
        q = ex2.adopt(5, p.pid, p.start_ticks, p.workdir)
        assert q is not None and q.popen is None
        assert wait_exits(ex2, timeout=0.8) == []  # still stopped
        ex2.cont(5)
        assert wait_exits(ex2) == [(5, 7)]  # exit code read from the wrapper's file
    finally:
        ex2.shutdown(kill=True)
        p.popen.wait()  # reap our child (a real restart's orphan is reaped by init)
