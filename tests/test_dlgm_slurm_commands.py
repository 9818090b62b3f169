"""The Slurm commands of a DLGM market on Slurm (:mod:`marketsched.live.dlgm_slurm`), on a fake
Slurm that records them (no cluster): each DLGM node is one Slurm node in ``sinfo`` order, a
start is ``sbatch -w`` of the node the market chose, a cancel or stop ``scancel``; a market
whose --slots differ from the Slurm nodes is refused. The real clusters:
tests/test_slurm_dlgm.py (one host) and tests/test_cluster_dlgm.py (four nodes)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

import marketsched.platform.slurm as slurm
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dlgm_service import DLGMService
from marketsched.live.dlgm_slurm import DLGMSlurmExecutor

NODES = ["node1", "node2", "node3"]


class Calls(list):
    """The Slurm commands run, in order; ``done``: Slurm job ids whose command has ended
    (``COMPLETED``, exit code 0), which ``squeue`` no longer lists."""

    done: set[int]


@pytest.fixture
def fake_slurm(monkeypatch):
    calls = Calls()
    calls.done = set()
    ids = iter(range(100, 200))
    running: list[int] = []  # Slurm job ids submitted and not cancelled

    def run(args, timeout=30.0, input=None, env=None):
        calls.append(list(args))
        if args[0] == "sinfo" and "%P" in args:
            return "main*\n"
        if args[0] == "sinfo" and "%N %C %t" in args:
            return "".join(f"{n} 0/2/0/2 idle\n" for n in NODES)
        if args[0] == "sinfo" and "%N" in args:
            return "".join(f"{n}\n" for n in NODES)
        if args[0] == "sbatch":
            running.append(next(ids))
            return f"{running[-1]}\n"
        if args[0] == "scancel":
            running.remove(int(args[1]))
        if args[0] == "squeue" and "%i|%T|%r" in args:
            return "".join(f"{i}|RUNNING|None\n" for i in running if i not in calls.done)
        if args[:4] == ["scontrol", "-o", "show", "job"] and int(args[4]) in calls.done:
            return f"JobId={args[4]} JobState=COMPLETED ExitCode=0:0\n"
        return ""

    monkeypatch.setattr(slurm, "run", run)
    return calls


def test_each_dlgm_node_is_a_slurm_node_and_a_start_is_sbatch_on_it(fake_slurm, tmp_path):
    """Three Slurm nodes, three DLGM nodes: the market's node choice (idle nodes: the lowest
    first) is the node ``sbatch -w`` names; a job stopped at its reported run time is
    ``scancel``-ed."""
    from marketsched.platform.clock import FakeClock

    clock = FakeClock(0.0)
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm")
    assert ex.nodes == NODES
    b = Broker(tmp_path / "market", MarketConfig(slots=3, single_user=True), clock=clock)
    try:
        b.ensure_admin()
        b.add_user(True, "alice", 100)
        svc = DLGMService(b, False, executor=ex)
        got = [svc.submit("alice", 1, 10, "true")["node"] for _ in range(3)]
        sb = [c for c in fake_slurm if c[0] == "sbatch"]
        assert got == [0, 1, 2] and [c[c.index("-w") + 1] for c in sb] == NODES
        assert svc.status("admin", True)["nodes"][1]["host"] == "node2"
        from marketsched.live.cli import _echo_nodes

        shown = CliRunner().invoke(click.command()(lambda: _echo_nodes(
            {"mechanism": "dlgm", "dlgm": svc.status("admin", True)["nodes"]})))
        assert "node 1 (Slurm node node2): job 2 (alice, weight 1)" in shown.output, shown.output
        clock.set(10)
        svc.step()  # the three reported run times are up: each Slurm job is cancelled
        assert sorted(c[1] for c in fake_slurm if c[0] == "scancel") == ["100", "101", "102"]
    finally:
        b.stop()


def test_slots_other_than_the_slurm_nodes_are_refused(fake_slurm, tmp_path):
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm")
    b = Broker(tmp_path / "market", MarketConfig(slots=2, single_user=True))
    try:
        with pytest.raises(ValueError, match="the partition has 3 \\(node1, node2, node3\\), so serve it with --slots 3"):
            DLGMService(b, False, executor=ex)
    finally:
        b.stop()


def test_a_held_jobs_slurm_job_that_ended_completes_at_its_turn_and_is_not_submitted_again(fake_slurm, tmp_path):
    """P-DLGM: A starts on node 0 (``sbatch -w node1``) and B, named to node 0 with a higher
    ratio, takes the start back at the same instant (A held: ``scontrol suspend``); A's Slurm
    job had already completed. The market hears of it at its loop; at B's reported time A starts
    and completes at once, with no ``scontrol resume`` and no second ``sbatch`` (before, the
    Slurm executor, which drops a job once it reports its end, had the market submit A's
    command again: event ``relaunch``)."""
    from marketsched.platform.clock import FakeClock

    clock = FakeClock(0.0)
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm", poll=0.0)
    b = Broker(tmp_path / "market", MarketConfig(slots=3, single_user=True), clock=clock)
    try:
        b.ensure_admin()
        b.add_user(True, "alice", 100)
        b.add_user(True, "bob", 100)
        svc = DLGMService(b, True, executor=ex)
        a = svc.submit("alice", 1, 10, "true")["id"]
        bj = svc.submit("bob", 5, 2, "true", node=0)["id"]
        assert svc.market.held == {a} and ["scontrol", "suspend", "100"] in fake_slurm
        fake_slurm.done.add(100)
        clock.set(0.5)
        svc.step()
        clock.set(2)
        svc.step()
        assert (svc.job("admin", True, a)["state"], svc.job("admin", True, bj)["state"]) == ("completed", "stopped")
        assert [c[c.index("-w") + 1] for c in fake_slurm if c[0] == "sbatch"] == ["node1", "node1"]  # A, B: once each
        assert not [c for c in fake_slurm if c[:2] == ["scontrol", "resume"]]
        assert [e["kind"] for e in svc.job("admin", True, a)["events"]] == \
            ["node", "start", "unstart", "exited", "start", "completed"]
    finally:
        b.stop()
