"""Helpers shared by the live-market tests (local processes and Slurm)."""

import time


def wait_for(pred, timeout=60.0, every=0.05):
    """Poll ``pred`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def work(seconds, tag="", step=0.05):
    """A command needing ``seconds`` of *running* time: short sleeps in a loop, so time spent
    stopped (SIGSTOP, Slurm suspend) does not count (one plain ``sleep`` counts wall time even
    when stopped, since the kernel restarts it against its original deadline)."""
    n = max(1, round(seconds / step))
    return f"i=0; while [ $i -lt {n} ]; do sleep {step}; i=$((i+1)); done; echo done {tag}"


def require_cgroups(executor):
    """Fail (as root, or when ``CI`` is set) or skip (a normal user's machine) when the executor
    found no writable cgroup: cgroup tests never skip silently where cgroups must work."""
    import os

    import pytest

    if executor.contained:
        return
    why = f"no writable cgroup for jobs: {executor.layout.notes}"
    if os.geteuid() == 0 or os.environ.get("CI"):
        pytest.fail(why + " (running as root or in CI, where cgroups must work)")
    pytest.skip(why)


def proc_state(pid):
    """Scheduler state letter of ``pid`` (R, S, D, T, Z, ...), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
