"""Tycoon mode for real (Feldman, Lai & Zhang 2005, ACM EC): user agents re-split their
budgets across hosts (CPUs) with the library's best response every interval, in a background
thread, and the CPU time the jobs' processes get follows the bids.

Stated tolerance: once the bids have converged, on every host each user's measured fraction of
the host's CPU time over 60 s (from ``/proc/PID/stat``, while the agents keep re-splitting every
0.5 s) is within 0.06 (absolute) of its share x_ij / sum_k x_kj, with the cgroup weights
("auto": cgroup v2 or v1, whichever this machine offers) and with the stride fallback. A user
bidding 0 on a host gets no CPU there. The bids of every round played equal the library's
sequential best-response dynamics replayed offline.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from live_helpers import wait_for
from marketsched.live.cli import market
from marketsched.live.tycoon import (
    BUSY,
    TycoonJob,
    TycoonMarket,
    detect_enforcement,
    find_cgroup1_cpu,
    find_cgroup2_cpu,
)
from marketsched.mechanisms.games.best_response import best_response

TOL = 0.06
MEASURE = 60.0
INTERVAL = 0.5
WEIGHTS = np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
BUDGETS = [1.0, 2.0, 1.5]


def two_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to act as two hosts")
    return cpus[:2]


def replay_dynamics(rounds, x=None, reserve=1e-3):
    """The agents' arithmetic offline: ``rounds`` rounds of sequential best responses from ``x``
    (default: weight-proportional bids); returns the bids after each round, [start, 1, ..., rounds]."""
    x = WEIGHTS / WEIGHTS.sum(axis=1, keepdims=True) * np.array(BUDGETS)[:, None] if x is None else x.copy()
    out = [x.copy()]
    for _ in range(rounds):
        for i in range(len(BUDGETS)):
            x[i] = best_response(WEIGHTS[i], x.sum(axis=0) - x[i], BUDGETS[i], reserve=reserve)
        out.append(x.copy())
    return out


def converged_round(tol=1e-9):
    """First round after which one more round moves no bid by more than ``tol``."""
    hist = replay_dynamics(50)
    return next(k for k in range(1, 50) if np.abs(hist[k + 1] - hist[k]).max() < tol)


def leftovers(market):
    alive = [j.pid for j in market.jobs.values() if j.popen.poll() is None]
    return alive, (market.root is not None and market.root.exists())


@pytest.mark.parametrize("enforcement", ["auto", "stride"])
def test_measured_cpu_shares_over_a_minute_follow_the_agents_bids(enforcement, request):
    m = TycoonMarket(two_cpus(), BUDGETS, WEIGHTS, interval=INTERVAL, enforcement=enforcement)
    if enforcement == "auto":  # a writable cpu cgroup is used when there is one (here: v1)
        assert m.enforcement == detect_enforcement()
        if find_cgroup1_cpu() is not None or find_cgroup2_cpu() is not None:
            assert m.enforcement in ("cgroup1", "cgroup2")
    try:
        m.start()
        k = converged_round()
        assert wait_for(lambda: m.snapshot()[0] >= k, timeout=k * INTERVAL + 30), "the agents did not re-split"
        r0, bids0, share = m.snapshot()
        cpu, measured = m.measure(MEASURE)
        r1, bids1, _ = m.snapshot()
        history = m.history[: r1 + 1]
    finally:
        m.stop()
    alive, cg = leftovers(m)
    assert alive == [] and not cg
    # the agents thread kept re-splitting every interval during the minute
    assert r1 - r0 >= 0.9 * MEASURE / INTERVAL, f"only {r1 - r0} rounds in {MEASURE} s"
    # every round played is the library's sequential best-response dynamics
    np.testing.assert_allclose(np.array(history), np.array(replay_dynamics(r1)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(bids1.sum(axis=1), BUDGETS)
    # converged before the measurement: the shares measured against did not move during it, and
    # the bids are a fixed point of the best responses
    np.testing.assert_allclose(bids1, bids0, atol=1e-9)
    np.testing.assert_allclose(replay_dynamics(1, bids1)[1], bids1, atol=1e-9)
    assert bids1[0, 1] == 0  # user 0 values host 1 little: its whole budget goes to host 0
    assert cpu.sum(axis=0).min() > 0.5 * MEASURE, f"the hosts ran too little to measure: {cpu}"
    err = np.abs(measured - share)
    request.node.user_properties += [("enforcement", m.enforcement), ("max_share_error", float(err.max()))]
    assert err.max() <= TOL, f"{m.enforcement}: bids' shares\n{share}\nmeasured over {MEASURE} s\n{measured}"
    assert cpu[0, 1] <= 0.02  # a zero bid: the job is stopped


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="weights must be"):
        TycoonMarket([0], [1.0, 1.0], [[1.0]])
    with pytest.raises(ValueError, match="budgets must be positive"):
        TycoonMarket([0], [0.0], [[1.0]])
    with pytest.raises(ValueError, match="not available"):
        TycoonMarket([10_000], [1.0], [[1.0]])
    cpu = min(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match="unknown enforcement"):
        TycoonMarket([cpu], [1.0], [[1.0]], enforcement="magic")
    with pytest.raises(ValueError, match="distinct"):
        TycoonMarket([cpu, cpu], [1.0], [[1.0, 1.0]])


# ---------------------------------------------------------------------------- the CLI
def busy_children(parent=None):
    """CPU-bound Tycoon jobs (BUSY) still alive whose parent is ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and BUSY in cmd:
            found.append(int(d.name))
    return found


def our_cgroups(pid=None):
    """Tycoon cgroups of process ``pid`` (default: this one) still there."""
    pid = os.getpid() if pid is None else pid
    return [p for root in (find_cgroup1_cpu(), find_cgroup2_cpu()) if root is not None
            for p in root.glob(f"marketsched-tycoon-{pid}-*")]


def test_cli_prints_bids_shares_and_measured_cpu_and_leaves_nothing():
    cpus = two_cpus()
    res = CliRunner().invoke(market, ["tycoon", "--duration", "3", "--every", "1.5", "--interval", "0.5"])
    assert res.exit_code == 0, res.output
    assert busy_children() == [] and our_cgroups() == []
    lines = res.output.splitlines()
    assert f"hosts (CPUs) {cpus[0]},{cpus[1]}; enforcement {detect_enforcement()}" in lines[0]
    headers = [n for n, line in enumerate(lines) if line.split() == ["user", "budget", "host", "bid", "share",
                                                                     "measured", "cpu", "s"]]
    assert len(headers) == 2  # a table every 1.5 s over 3 s
    rows = [line.split() for line in lines[headers[-1] + 1: headers[-1] + 7]]
    got = {(int(r[0]), int(r[2])): [float(v) for v in r[3:]] for r in rows}
    assert sorted(got) == [(i, c) for i in range(3) for c in cpus]
    rounds = int(lines[headers[-1] - 1].split("round ")[1].split(";")[0])
    assert rounds >= 4  # re-splits every 0.5 s
    bids = replay_dynamics(rounds)[rounds]
    for i in range(3):
        for j, c in enumerate(cpus):
            assert got[(i, c)][0] == pytest.approx(bids[i, j], abs=5e-5)  # printed to 4 decimals
    assert got[(0, cpus[1])][2] == 0.0  # measured: user 0 bids 0 on host 1 and gets no CPU there
    assert float(lines[headers[-1] + 7].split(":")[1]) <= TOL  # max |measured - share|, the same tolerance
    assert lines[-1].startswith("stopped: 6 jobs killed")


@pytest.mark.parametrize("args, message", [
    (["--budgets", "1,x"], "'x' is not a number"),
    (["--budgets", "1,,2"], "an entry is empty"),
    (["--budgets", "1,-2,1.5"], "budgets must be positive"),
    (["--hosts", "0,a"], "'a' is not an integer"),
    (["--hosts", "10000"], "not available"),
    (["--weights", "0.7,0.3;0.2"], "rows of different lengths"),
    (["--weights", "1,1,1;1,1,1;1,1,1"], "weights must be (users, hosts) = (3, 2)"),
])
def test_cli_refuses_malformed_options(args, message):
    two_cpus()
    res = CliRunner().invoke(market, ["tycoon", "--duration", "1", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert busy_children() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_interrupted_leaves_nothing(sig):
    two_cpus()
    proc = subprocess.Popen([sys.executable, "-m", "marketsched.live.cli", "tycoon", "--duration", "60", "--every", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(busy_children(proc.pid)) == 6, timeout=30), "the 6 jobs did not start"
        jobs = busy_children(proc.pid)
        proc.send_signal(sig)  # Ctrl-C, or a kill
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "interrupted: stopping the jobs" in err, err
    assert "enforcement" in out
    assert [pid for pid in jobs if Path(f"/proc/{pid}").exists()] == []
    assert our_cgroups(proc.pid) == []


def test_stride_job_whose_bid_was_tiny_is_not_starved_after_it_rises():
    # the stride thread with fake jobs (no processes): user 0 bids almost nothing for a while
    # (its pass jumps by 1e9 per quantum), then both bid 1: they must alternate (Waldspurger and
    # Weihl's dynamic ticket change scales the distance to the global pass), not user 1 alone
    cpu = sorted(os.sched_getaffinity(0))[0]
    m = TycoonMarket([cpu], [1.0, 1.0], [[1.0], [1.0]], enforcement="stride", quantum=0.001)

    def fake_signal(job, sig):
        job.stopped = sig == signal.SIGSTOP

    m._signal = fake_signal
    for i in range(2):
        m.jobs[(i, 0)] = TycoonJob(i, 0, -1, None, stopped=True)
    m.bids[:] = [[1e-9], [1.0]]
    th = threading.Thread(target=m._stride, args=(0,), daemon=True)
    th.start()
    try:
        time.sleep(0.05)
        with m._lock:
            m.bids[:] = [[1.0], [1.0]]
        time.sleep(0.05)
        with m._lock:
            before = [m.jobs[(i, 0)].pass_ for i in range(2)]
        time.sleep(0.3)
        with m._lock:
            ran = [m.jobs[(i, 0)].pass_ - before[i] for i in range(2)]  # quanta run (bid 1: +1 each)
    finally:
        m._stop.set()
        th.join()
    assert min(ran) >= 10 and abs(ran[0] - ran[1]) <= 1, ran
