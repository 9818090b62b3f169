"""The live market's walkthroughs (README.md, docs/live_market.md) run as written, in bash,
in a fresh folder: as root and as a normal Unix account, the same text. Each must end with
status 0 (``bash -e``: any failing command fails it), show what its comments promise, and leave
no job process behind once the broker has stopped."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from live_helpers import free_port, proc_state, wait_for, work
from marketsched.live.cli import Client
from marketsched.platform.executor import kill_recorded_jobs, proc_start_ticks
from walkthroughs import environment, walkthroughs

LIVE = walkthroughs("live")


def test_the_live_walkthroughs_are_found():
    assert {where.split(":")[0] for where, _ in LIVE} == {"README.md", "docs/live_market.md"}


def _job_processes(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (the walkthrough's job commands)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and "pytest" not in cmd:
                found.append(f"{d.name}: {cmd}")
    return found


def _run(script: str, cwd: Path, env: dict, user: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["bash", "-e", "-c", script]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}", "--init-groups", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def _check(out: subprocess.CompletedProcess, where: str) -> None:
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"{where} failed ({out.returncode}):\n{text[-4000:]}"
    assert "job 2 completed" in out.stdout and "job 1 completed" in out.stdout, text[-4000:]
    show = out.stdout[out.stdout.index("job 1 of alice"):]
    for event in ("start", "preempt", "resume", "completed"):
        assert f" {event} " in show, show
    assert "alice 40" in show
    assert _job_processes("echo alice") == [] and _job_processes("echo bob") == []


@pytest.mark.parametrize("where,script", LIVE, ids=[w for w, _ in LIVE])
def test_live_walkthrough_as_root(where, script, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the same walkthrough runs as a normal account in the next test)")
    _check(_run(script, tmp_path, environment()), where)


@pytest.mark.parametrize("where,script", LIVE, ids=[w for w, _ in LIVE])
def test_live_walkthrough_as_a_normal_user(where, script, accounts):
    account = pwd.getpwnam(accounts[0])
    try:
        probe = subprocess.run([sys.executable, "-c", "import marketsched.live.cli"], user=account.pw_uid,
                               capture_output=True, text=True, timeout=120)
        why = probe.stderr.strip()[-200:] if probe.returncode else None
    except OSError as exc:  # e.g. an interpreter under root's 0700 home
        why = str(exc)
    if why is not None:
        pytest.skip(f"another account cannot run this installation ({sys.executable}): {why}")
    home = Path(account.pw_dir)
    _check(_run(script, home, environment(str(home)), user=accounts[0]), where)


def _suspended(pid: int) -> bool:
    """``pid`` is stopped (SIGSTOP) or sits in a frozen cgroup (v2 ``cgroup.events``, v1 freezer)."""
    if proc_state(pid) == "T":
        return True
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        base = Path("/sys/fs/cgroup")
        if controllers == "freezer":
            state = base / "freezer" / rel.lstrip("/") / "freezer.state"
            if state.exists() and state.read_text().strip() == "FROZEN":
                return True
        elif controllers == "":
            for root in (base, base / "unified"):
                events = root / rel.lstrip("/") / "cgroup.events"
                if rel != "/" and events.exists() and "frozen 1" in events.read_text().splitlines():
                    return True
    return False


def test_wait_for_readiness_and_a_stop_that_leaves_the_running_job_suspended(tmp_path):
    """`market wait` returns once `serve` is ready and fails once it has stopped; SIGTERM (the
    walkthrough's `kill %1`) suspends the running job and leaves it so (by design: the next
    `serve` resumes it), which the next broker does."""
    data, release, port = tmp_path / "market", tmp_path / "release", free_port()
    env = environment()
    cli = [sys.executable, "-m", "marketsched.cli", "market"]
    serve = [*cli, "serve", "--data", str(data), "--port", str(port), "--slots", "1", "--single-user"]
    log = open(tmp_path / "broker.log", "ab")
    broker = subprocess.Popen(serve, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
    try:
        ready = subprocess.run([*cli, "wait", "--data", str(data)], capture_output=True, text=True, env=env,
                               timeout=300)
        assert ready.returncode == 0 and ready.stdout.strip() == f"http://127.0.0.1:{port}", ready
        admin = Client(ready.stdout.strip(), (data / "admin.token").read_text().strip())
        alice = Client(admin.url, admin.post("/api/users", {"name": "alice", "deposit": 100})["token"])
        job = alice.post("/api/jobs", {"bid": 2, "command": work(0.1, "x", until=release)})
        assert job["state"] == "running"
        assert wait_for(lambda: admin.get(f"/api/jobs/{job['id']}")["pid"] is not None)
        pid = admin.get(f"/api/jobs/{job['id']}")["pid"]

        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=120) == 0
        assert not (data / "ready").exists()
        gone = subprocess.run([*cli, "wait", "--data", str(data), "--timeout", "0.5"], capture_output=True,
                              text=True, env=env, timeout=120)
        assert gone.returncode == 1 and "no market became ready" in gone.stderr
        assert proc_start_ticks(pid) is not None and _suspended(pid)  # left behind, suspended

        broker = subprocess.Popen(serve, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
        release.touch()
        done = subprocess.run([*cli, "wait", "--data", str(data), "--job", str(job["id"])], capture_output=True,
                              text=True, env={**env, "MARKETSCHED_TOKEN": admin.token}, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() == f"job {job['id']} completed", done
        assert wait_for(lambda: proc_start_ticks(pid) is None)
    finally:
        broker.terminate()
        broker.wait(timeout=120)
        kill_recorded_jobs(data)
