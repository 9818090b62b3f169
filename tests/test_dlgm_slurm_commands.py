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


@pytest.fixture
def fake_slurm(monkeypatch):
    calls: list[list[str]] = []
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
            return "".join(f"{i}|RUNNING|None\n" for i in running)
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
