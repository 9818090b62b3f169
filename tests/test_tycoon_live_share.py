"""Proportional Share and Sanghavi-Hajek as a running market (``marketsched market share``).

The shares are the simulator's rule (Stößer 2009, sections 6.2.2 and 6.2.3), enforced with the
cgroup CPU weights of Tycoon mode's machinery. Stated tolerance: each job's fraction of the CPU
time its cgroup used is within 0.05 (absolute) of the rule's share. The default test measures
until the jobs have used a few CPU-seconds of their own CPU time (a busy machine makes it take
longer, not fail); ``-m measure`` measures over 60 s of wall time. The replay tests run recorded
live bids (fixed and the simulator's ZIC bidder) through the simulator's share market and compare
shares and payments.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from live_helpers import end_and_clean_up, tagged_processes, wait_for
from marketsched.behaviour.learning import ZIC, make_bidder
from marketsched.live.cli import market
from marketsched.live.share import FixedBids, RecordedBids, ShareMarket, replay_through_simulator
from marketsched.live.tycoon import find_cgroup1_cpu, find_cgroup2_cpu
from marketsched.mechanisms.online.share import run_on_engine, sh_shares_rational
from marketsched.workloads.workload import Workload

TOL = 0.05
CPU_SECONDS = 2.0  # the default test: the jobs use this much CPU time during the measurement
MEASURE = 60.0  # -m measure: a minute of wall time
HANG = 600.0  # a guard against a hang, not a timing claim
BIDS = [3.0, 2.0, 1.0]  # PS: 1/2, 1/3, 1/6; SH: 31/54, 16/54, 7/54 (more than TOL apart for job 0)


def cpu():
    return min(os.sched_getaffinity(0))


def reference_shares(rule, bids):
    """The rules from their definitions, in exact arithmetic: PS b_j / sum b (Stößer 2009, 6.2.2);
    SH (a_j) integral_0^1 prod_{k != j} (1 - s a_k) ds with a = b / max b (6.2.3)."""
    if rule == "ps":
        tot = sum(Fraction(b) for b in bids)
        return [Fraction(b) / tot for b in bids]
    return sh_shares_rational(bids)


def our_cgroups(pid=None):
    pid = os.getpid() if pid is None else pid
    return [p for root in (find_cgroup1_cpu(), find_cgroup2_cpu()) if root is not None
            for p in root.glob(f"marketsched-share-{pid}-*")]


def alive(m):
    return [j.pid for j in m.jobs.values() if j.popen is not None and j.popen.poll() is None]


def measure_cpu(m, cpu_seconds):
    """CPU time each job's cgroup used while all of them used ``cpu_seconds`` together, and each
    job's fraction of it: the jobs' own CPU time decides the length."""
    a = m.cpu_seconds()
    ok = wait_for(lambda: (m.cpu_seconds() - a).sum() >= cpu_seconds, timeout=HANG, every=0.1)
    d = (m.cpu_seconds() - a)[:, 0]
    assert ok, f"the jobs did not use {cpu_seconds} CPU-seconds in {HANG} s: {d}"
    return d, d / d.sum()


# ---------------------------------------------------------------------------- the rule, process-free
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_each_period_is_the_rule_on_the_periods_bids_with_ties(rule):
    """Random bids with ties and zeros (ZIC-like integers): every period's shares equal the rule's
    definition, payments are the bids (pay-as-bid), and the totals are their sums."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 6))
        table = rng.integers(0, 4, size=(6, n)).astype(float)
        table[:, 0] = np.maximum(table[:, 0], 1.0)  # a positive bid in every period
        m = ShareMarket(cpu(), rule, RecordedBids(table), np.ones(n), enforcement="stride")
        for row in table:
            p = m._round()
            np.testing.assert_array_equal(p.bids, row)
            np.testing.assert_allclose(p.shares, [float(x) for x in reference_shares(rule, row)], rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(p.payments, row)
        np.testing.assert_array_equal(m.paid, table.sum(axis=0))


def test_bad_markets_are_refused():
    with pytest.raises(ValueError, match="unknown rule"):
        ShareMarket(cpu(), "vcg", FixedBids([1.0]), [1.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        FixedBids([1.0, -2.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        FixedBids([1.0, float("nan")])
    with pytest.raises(ValueError, match="at least one bid must be positive"):
        FixedBids([0.0, 0.0])
    with pytest.raises(ValueError, match="2 bids for 3 jobs"):
        ShareMarket(cpu(), "ps", FixedBids([1.0, 2.0]), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="not available"):
        ShareMarket(10_000, "ps", FixedBids([1.0]), [1.0])
    with pytest.raises(ValueError, match="values must be >= 1"):
        ShareMarket(cpu(), "ps", ZIC(), [0.5, 2.0])


# ---------------------------------------------------------------------------- real processes
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_measured_cgroup_shares_follow_the_rule(rule, request):
    m = ShareMarket(cpu(), rule, FixedBids(BIDS), BIDS, interval=0.2)
    try:
        m.start()
        assert wait_for(lambda: len(m.history) >= 3, timeout=HANG), "the bidders did not rebid"
        cpu_s, measured = measure_cpu(m, CPU_SECONDS)
    finally:
        m.stop()
    assert alive(m) == [] and our_cgroups() == []
    share = np.array([float(x) for x in reference_shares(rule, BIDS)])
    for p in m.history:  # the bidders rebid every period; every period is the rule on the bids
        np.testing.assert_array_equal(p.bids, BIDS)
        np.testing.assert_allclose(p.shares, share, rtol=1e-12)
    np.testing.assert_array_equal(m.paid, np.array(BIDS) * len(m.history))
    received, paid = replay_through_simulator(rule, [p.bids for p in m.history])  # the recorded run, replayed
    np.testing.assert_allclose(received, share * len(m.history), rtol=1e-12)
    np.testing.assert_array_equal(np.round(paid * 1e6), np.round(m.paid * 1e6))
    with pytest.raises(RuntimeError, match="starts once"):
        m.start()
    err = np.abs(measured - share).max()
    request.node.user_properties += [("enforcement", m.enforcement), ("max_share_error", float(err))]
    assert err <= TOL, f"{rule} {m.enforcement}: rule\n{share}\nmeasured\n{measured}\ncpu s\n{cpu_s}"


@pytest.mark.measure
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_measured_cgroup_shares_over_a_minute_follow_the_rule(rule):
    m = ShareMarket(cpu(), rule, FixedBids(BIDS), BIDS, interval=1.0)
    try:
        m.start()
        cpu_s, measured = m.measure(MEASURE)
    finally:
        m.stop()
    share = np.array([float(x) for x in reference_shares(rule, BIDS)])
    err = np.abs(measured[:, 0] - share).max()
    print(f"\nshare {rule} {m.enforcement}: max |measured - rule| {err:.4f} over {MEASURE:g} s; "
          f"CPU seconds {cpu_s.sum():.1f}")
    assert cpu_s.sum() > 0.5 * MEASURE, f"the CPU ran too little to measure: {cpu_s}"
    assert err <= TOL


def simulator_run(rule, bidder, values, rounds, seed):
    """The simulator's share market with its own bidder: every job released at 0 for ``rounds``
    seconds on one CPU; returns ``(CPU-seconds received, payments)``."""
    n = len(values)
    w = Workload.from_columns(submit_time=np.zeros(n), runtime=np.full(n, float(rounds)), capacity=1)
    records, policy = run_on_engine(w, values, rule, make_bidder(bidder, values), capacity=1.0, rng=seed)
    return policy.received, np.asarray(records.payment)


@pytest.mark.parametrize("bidder", ["zic", "q-learning"])
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_live_bidder_run_replays_through_the_simulator(rule, bidder):
    """The simulator's ZIC and Q-learning bidders as live agents: replayed through the
    simulator's share market, the recorded bids give the same shares (CPU-seconds received) and
    the same payments, to the micro-unit; and the simulator with its own bidder and the same
    seed gives the same payments (the live agents bid what the simulated ones bid)."""
    values = np.array([4.0, 9.0, 9.0, 20.0])
    m = ShareMarket(cpu(), rule, make_bidder(bidder, values), values, interval=0.1, seed=11)
    try:
        m.start()
        assert wait_for(lambda: len(m.history) >= 5, timeout=HANG)
    finally:
        m.stop()
    bids = np.array([p.bids for p in m.history])
    received, paid = replay_through_simulator(rule, bids)
    np.testing.assert_allclose(received, np.sum([p.shares for p in m.history], axis=0), rtol=1e-12)
    np.testing.assert_array_equal(np.round(paid * 1e6), np.round(m.paid * 1e6))
    sim_received, sim_paid = simulator_run(rule, bidder, values, len(bids), 11)
    np.testing.assert_array_equal(np.round(sim_paid * 1e6), np.round(m.paid * 1e6))
    np.testing.assert_allclose(sim_received, received, rtol=1e-12)


@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_learning_agent_over_many_periods_bids_as_in_the_simulator(rule):
    """Q-learning learns from the shares it gets: over 300 periods (process-free: the periods
    without enforcement) its bids, and so the payments, stay those of the simulator's run."""
    values = np.array([12.0, 40.0, 75.0, 150.0, 150.0])
    m = ShareMarket(cpu(), rule, make_bidder("q-learning", values), values, seed=5, enforcement="stride")
    for _ in range(300):
        m._round()
    received, paid = simulator_run(rule, "q-learning", values, 300, 5)
    np.testing.assert_array_equal(np.round(paid * 1e6), np.round(m.paid * 1e6))
    np.testing.assert_allclose(received, np.sum([p.shares for p in m.history], axis=0), rtol=1e-12)


def test_cli_runs_sh_and_leaves_nothing():
    res = CliRunner().invoke(market, ["share", "--rule", "sh", "--bids", "3,2,1", "--interval", "0.5",
                                      "--duration", "2", "--every", "1"])
    assert res.exit_code == 0, res.output
    assert our_cgroups() == []
    lines = res.output.splitlines()
    assert lines[0].startswith(f"share: Sanghavi-Hajek, 3 jobs on CPU {cpu()}")
    headers = [i for i, line in enumerate(lines) if line.split() == ["job", "bid", "share", "rule", "measured",
                                                                    "cpu", "s", "paid"]]
    assert len(headers) == 2
    share = [float(x) for x in reference_shares("sh", BIDS)]
    for h in headers:
        rows = [line.split() for line in lines[h + 1: h + 4]]
        for i, r in enumerate(rows):
            assert float(r[1]) == BIDS[i]
            assert float(r[2]) == pytest.approx(share[i], abs=5e-5)
            assert float(r[6]) % BIDS[i] == 0  # paid: the bid once per period so far
    assert lines[-1].startswith("stopped: 3 jobs killed")


@pytest.mark.parametrize("args, message", [
    (["--rule", "ps"], "needs --bids"),
    (["--rule", "ps", "--bids", "1,x"], "'x' is not a number"),
    (["--rule", "ps", "--bids", "1,-2"], "finite and >= 0"),
    (["--rule", "ps", "--bids", "0,0"], "at least one bid must be positive"),
    (["--rule", "sh", "--bidder", "zic"], "needs --values"),
    (["--rule", "sh", "--bidder", "q-learning", "--values", "5,x"], "'x' is not a number"),
    (["--rule", "sh", "--bidder", "zic", "--values", "5,9", "--bids", "1,2"], "--bids is for --bidder fixed"),
    (["--rule", "sh", "--bidder", "zic", "--values", "0.5,3"], "values must be >= 1"),
    (["--rule", "sh", "--host", "10000", "--bids", "1"], "not available"),
    (["--rule", "xx", "--bids", "1"], "'xx' is not one of"),
])
def test_cli_refuses_malformed_options(args, message):
    res = CliRunner().invoke(market, ["share", *args, "--duration", "1"])
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_interrupted_leaves_nothing(sig):
    """Ctrl-C or a kill once the market has started: every job and cgroup is removed (the jobs
    inherit ``MARKETSCHED_TEST_TAG``, so an orphan would be found)."""
    tag = f"share-{os.getpid()}-{sig}"
    proc = subprocess.Popen([sys.executable, "-m", "marketsched.live.cli", "share", "--rule", "sh", "--bidder", "zic",
                             "--values", "5,9", "--duration", "60", "--every", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MARKETSCHED_TEST_TAG": tag})
    try:
        assert "enforcement" in proc.stdout.readline()  # printed once start() has returned
        assert tagged_processes(tag), "no job running"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG)
    finally:
        left = end_and_clean_up(proc, tag)
    assert proc.returncode == 1 and "interrupted: stopping the jobs" in err, err
    assert "stopped" not in out
    assert left == []
    assert our_cgroups(proc.pid) == []
