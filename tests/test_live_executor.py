"""Local executor with real processes, in both containment modes: cgroups (every process of a
job frozen, thawed and killed together; CPU and memory limits) and the process-group fallback
(SIGSTOP/SIGCONT/SIGKILL to the group). Own folder and session, clean environment, exit codes,
re-attachment by the state file (pid + start time), never a second launch of a key."""

import os
import signal
import time

import pytest

from live_helpers import proc_state, require_cgroups, wait_for
from marketsched.platform import jobfiles
from marketsched.platform.executor import LocalExecutor, proc_start_ticks


def wait_exits(ex, n=1, timeout=30.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        ex.wait(0.2)
        got += ex.exits()
    return got


@pytest.fixture(params=["cgroup", "pgroup"])
def ex(request, tmp_path):
    e = LocalExecutor(tmp_path / "jobs", containment="auto" if request.param == "cgroup" else "none")
    if request.param == "cgroup":
        require_cgroups(e)
    yield e
    e.shutdown(kill=True)


@pytest.fixture
def cex(tmp_path):
    e = LocalExecutor(tmp_path / "jobs")
    require_cgroups(e)
    yield e
    e.shutdown(kill=True)


def read_when(path, timeout=30.0):
    assert wait_for(lambda: path.exists() and path.read_text().strip(), timeout), f"{path} never written"
    return path.read_text()


def test_runs_in_own_session_and_folder_with_output_and_exit_code(ex):
    p = ex.launch(1, "echo hello; echo oops >&2; pwd; exit 3")
    assert os.getpgid(p.pid) == p.pid != os.getpgid(0)
    assert os.getsid(p.pid) == p.pid
    assert wait_exits(ex) == [(1, 3)]
    assert (p.workdir / "stdout").read_text().splitlines() == ["hello", str(p.workdir)]
    assert (p.workdir / "stderr").read_text() == "oops\n"
    assert 1 not in ex.procs
    assert oct((p.workdir).stat().st_mode & 0o777) == oct(0o700)
    rec = jobfiles.read_state(ex.root, 1)  # the broker's record, outside the job's folder
    assert rec["pid"] == p.pid and rec["ticks"] == p.start_ticks
    assert oct(jobfiles.state_path(ex.root, 1).stat().st_mode & 0o777) == oct(0o600)


def test_job_gets_a_clean_environment_not_the_brokers(ex, monkeypatch):
    monkeypatch.setenv("MARKETSCHED_TOKEN", "secret-of-the-broker")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    p = ex.launch(2, "env", env={"MARKETSCHED_JOB_ID": "2"})
    assert wait_exits(ex) == [(2, 0)]
    env = dict(line.split("=", 1) for line in (p.workdir / "stdout").read_text().splitlines() if "=" in line)
    assert "MARKETSCHED_TOKEN" not in env and "PYTHONPATH" not in env
    assert env["MARKETSCHED_JOB_ID"] == "2" and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert set(env) <= {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "PWD", "MARKETSCHED_JOB_ID", "SHLVL", "_",
                        "OLDPWD"}


def counting(tag="count"):
    return f"sh -c 'i=0; while [ $i -lt 2000 ]; do i=$((i+1)); echo $i >> {tag}; sleep 0.01; done'"


def test_stop_and_continue_every_process_of_the_job(ex):
    # the command starts a child that counts; both must stop and continue
    p = ex.launch(3, counting())
    read_when(p.workdir / "count")
    assert ex.stop(3)
    if ex.contained:
        assert wait_for(lambda: ex.frozen(3), 30)
    else:
        assert wait_for(lambda: proc_state(p.pid) == "T", 30)
    c1 = (p.workdir / "count").read_text()
    time.sleep(0.3)
    assert (p.workdir / "count").read_text() == c1  # nothing of the job ran while stopped
    assert ex.exits() == []
    assert ex.cont(3)
    assert wait_for(lambda: len((p.workdir / "count").read_text()) > len(c1), 30)
    ex.kill(3)


def test_cancel_kills_the_job_including_grandchildren(ex):
    p = ex.launch(4, "sleep 30 & echo $! > child; wait")
    child = int(read_when(p.workdir / "child"))
    ex.stop(4)
    ex.kill(4)  # works on a stopped job too
    assert wait_for(lambda: proc_start_ticks(p.pid) is None and proc_start_ticks(child) is None, 30)
    assert 4 not in ex.procs


def test_exit_by_signal_is_reported(ex):
    ex.launch(5, "kill -TERM $$")
    assert wait_exits(ex) == [(5, 128 + signal.SIGTERM)]


def test_a_key_is_never_launched_twice_by_one_executor(ex):
    ex.launch(6, "true")
    assert wait_exits(ex) == [(6, 0)]
    with pytest.raises(RuntimeError, match="never runs twice"):
        ex.launch(6, "true")


def test_reattach_by_the_state_file_pid_and_start_time(tmp_path):
    ex1 = LocalExecutor(tmp_path / "jobs")
    p = ex1.launch(7, "sleep 0.6; exit 7")
    ex1.stop(7)
    ex1.shutdown(kill=False)  # as after a crash: the process lives on, stopped
    ex2 = LocalExecutor(tmp_path / "jobs")
    try:
        assert ex2.adopt(8, 999_999_999, 0) is None  # no state file, no such process
        # a record whose pid now has another start time is a recycled pid: never taken for the
        # job, and left alone
        jobfiles.write_state(ex2.root, 9, {"pid": p.pid, "ticks": p.start_ticks + 1, "cgroups": [], "track": None})
        assert ex2.adopt(9) is None
        assert proc_start_ticks(p.pid) == p.start_ticks
        q = ex2.adopt(7)
        assert q is not None and q.popen is None and q.pid == p.pid
        assert wait_exits(ex2, timeout=0.8) == []  # still stopped
        ex2.cont(7)
        assert wait_exits(ex2) == [(7, 7)]  # exit code read from the wrapper's file
        with pytest.raises(RuntimeError):
            ex2.launch(7, "true")  # re-attached counts as started by this executor
    finally:
        ex2.shutdown(kill=True)
        p.popen.wait()  # reap our child (a real restart's orphan is reaped by init)


def test_reap_kills_jobs_whose_state_file_is_not_kept(tmp_path):
    ex1 = LocalExecutor(tmp_path / "jobs")
    a = ex1.launch(1, "sleep 30")
    b = ex1.launch(2, "sleep 30")
    ex1.shutdown(kill=False)
    ex2 = LocalExecutor(tmp_path / "jobs")
    try:
        assert ex2.reap(keep={2}) == 1
        assert wait_for(lambda: a.popen.poll() is not None, 30)
        assert proc_start_ticks(b.pid) is not None
        assert jobfiles.read_state(ex2.root, 1) is None and jobfiles.read_state(ex2.root, 2) is not None
        assert ex2.adopt(2) is not None
    finally:
        ex2.shutdown(kill=True)
        b.popen.wait()


# ---------------------------------------------------------------------------- cgroups only
def test_setsid_and_double_fork_children_are_frozen_and_killed_with_the_job(cex):
    p = cex.launch(1, "setsid sh -c 'while :; do :; done' & echo $! > esc; "
                      "(sh -c 'while :; do :; done' & echo $! > df) & sleep 30")
    esc = int(read_when(p.workdir / "esc"))
    df = int(read_when(p.workdir / "df"))
    # the escapee left the job's session and group (its pid is written before setsid has run)
    assert wait_for(lambda: os.getsid(esc) != p.pid, 60)
    for pid in (esc, df):
        assert f"/{cex.name}/job-1" in open(f"/proc/{pid}/cgroup").read()
    cex.stop(1)
    assert wait_for(lambda: cex.frozen(1), 30)
    assert proc_state(esc) != "R" and proc_state(df) != "R"
    cex.cont(1)
    assert wait_for(lambda: not cex.frozen(1), 30)
    cex.kill(1)
    assert proc_start_ticks(esc) is None and proc_start_ticks(df) is None
    assert not any(d.exists() for d in p.cgroup.dirs())  # the job's cgroups are removed


def test_cpu_and_memory_limits_are_set_and_a_job_over_its_memory_is_killed(cex):
    from marketsched.platform.executor import JobLimits

    p = cex.launch(2, "python3 -c 'x = b\"x\" * (256 << 20); print(len(x))'",
                   limits=JobLimits(cpus=0.5, memory=64 << 20))
    cg = p.cgroup
    if cex.layout.cpu is not None:
        kind, d = cg.cpu
        text = (d / ("cpu.max" if kind == "cgroup2" else "cpu.cfs_quota_us")).read_text().split()[0]
        assert int(text) == 50_000
    assert cex.layout.memory is not None, cex.layout.notes
    kind, d = cg.memory
    assert int((d / ("memory.max" if kind == "cgroup2" else "memory.limit_in_bytes")).read_text()) == 64 << 20
    [(key, code)] = wait_exits(cex)
    assert key == 2 and code == 128 + signal.SIGKILL  # the kernel's OOM killer, within the job's cgroup
    assert (p.workdir / "stdout").read_text() == ""


def test_a_job_started_frozen_runs_nothing_until_thawed(cex):
    p = cex.launch(3, "echo ran > out", frozen=True)
    assert wait_for(lambda: cex.frozen(3) and p.pid in p.cgroup.pids(), 30)
    time.sleep(0.3)
    assert not (p.workdir / "out").exists()
    cex.cont(3)
    assert wait_exits(cex) == [(3, 0)]
    assert (p.workdir / "out").read_text() == "ran\n"


def test_a_job_folder_swapped_during_the_launch_is_refused(ex, monkeypatch):
    """The launcher enters the job's folder by its path: were the folder replaced between the
    executor filling it and the launcher entering it, the launcher would run another
    ``command.sh``. It is caught (the waiting launcher's cwd is not the folder filled) and
    nothing runs."""
    import subprocess

    from marketsched.platform.jobfiles import JobFileError

    real = subprocess.Popen
    wd = ex.workdir(1)

    def swapping(*args, **kw):
        wd.rename(wd.with_name("elsewhere"))
        wd.mkdir()
        (wd / "command.sh").write_text("echo swapped > ran\n")
        return real(*args, **kw)

    monkeypatch.setattr(subprocess, "Popen", swapping)
    with pytest.raises(JobFileError, match="job folder job-1 was replaced"):
        ex.launch(1, "echo real > ran")
    monkeypatch.undo()
    # the launcher was killed and reaped before the error (it never had the go): nothing ran
    assert not (wd / "ran").exists() and not (wd.with_name("elsewhere") / "ran").exists()
    assert ex.procs == {} and jobfiles.read_state(ex.root, 1) is None
    assert ex.launch(2, "echo fine").pid and wait_exits(ex) == [(2, 0)]


LOGIN_FILES = (".profile", ".bash_profile", ".bash_login", ".bashrc")


def test_a_job_as_an_account_gets_the_documented_environment_and_no_login_shell(accounts, open_dir):
    """As the account, with exactly job_environment (PATH, HOME, USER, LOGNAME, SHELL, LANG, the
    market's variables) and no login shell: the account's start-up files, each of which writes a
    marker, are never read (the Slurm executor's counterpart is in tests/test_slurm_market.py)."""
    import pwd
    from pathlib import Path

    from marketsched.platform.executor import RunAs, job_environment

    user = RunAs.lookup(accounts[0])
    home = Path(pwd.getpwnam(user.name).pw_dir)
    marker = home / "login-shell-ran"
    for name in LOGIN_FILES:
        (home / name).write_text(f"echo {name} >> {marker}\nexport FROM_LOGIN=1\n")
    ex = LocalExecutor(open_dir / "jobs")
    try:
        p = ex.launch(5, "env", env={"MARKETSCHED_JOB_ID": "5"}, user=user)
        assert wait_exits(ex) == [(5, 0)]
        out = (p.workdir / "stdout").read_text()
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        ours = {k: v for k, v in env.items() if k not in {"PWD", "OLDPWD", "SHLVL", "_"}}
        assert ours == job_environment(user, {"MARKETSCHED_JOB_ID": "5"})
        assert not marker.exists(), marker.read_text()
    finally:
        ex.shutdown(kill=True)
        for name in LOGIN_FILES:
            (home / name).unlink(missing_ok=True)
