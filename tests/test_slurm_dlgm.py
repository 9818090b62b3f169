"""DLGM and P-DLGM on the one-host Slurm cluster (``scripts/slurm-up.sh``: one node): the
market's node is the Slurm node, a job starts with ``sbatch -w NODE``, P-DLGM preempts with
``scontrol suspend`` and resumes with ``scontrol resume``, and the run replays through the
simulator to the same nodes, preemptions and compensations."""

from __future__ import annotations

import pytest

from live_helpers import slurm_cancel_and_wait, wait_for, work
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dlgm_service import DLGMService, replay_recorded
from marketsched.live.dlgm_slurm import DLGMSlurmExecutor
from marketsched.platform.ledger import MICRO

HANG = 300.0  # waits end when their condition holds; this only guards against a hang


def serve_on_slurm(tmp_path, preemptive, slots=None):
    """A served DLGM market whose nodes are the Slurm partition's nodes."""
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm")
    b = Broker(tmp_path / "market", MarketConfig(slots=slots or len(ex.nodes), single_user=True)).start()
    b.ensure_admin()
    b.dlgm = DLGMService(b, preemptive, executor=ex).start()
    return b, ex


def slurm_job(ex, key) -> dict:
    return ex.show(ex.recorded(key)[0]) or {}


@pytest.fixture
def pdlgm(cluster, tmp_path):
    b, ex = serve_on_slurm(tmp_path, True)
    prefix = ex.job_name(0)[:-1]
    yield b, ex
    if not b._stopping:
        b.stop(kill_jobs=True)
    slurm_cancel_and_wait(prefix, HANG)


def test_pdlgm_on_slurm_preempts_by_suspend_resumes_and_replays_equal(pdlgm, tmp_path):
    """One Slurm node. alice's A (weight 1, reported 1000 s) starts there (``sbatch -w``); bob's
    B (weight 5, reported 500 s: ratio 1/100 above A's 1/1000) preempts it and pays alice
    1 * 500: Slurm suspends A and runs B on the same node. When B's command ends, the market
    resumes A (Slurm: RUNNING again). The record replays through the simulator to the same
    node, preemptions and money (the jobs end before their reported times, which the replay
    says). The test releases each command, so the order of events is the test's."""
    b, ex = pdlgm
    svc = b.dlgm
    for u in ("alice", "bob"):
        b.add_user(True, u, 1000)
    release_a, release_b = tmp_path / "release-a", tmp_path / "release-b"
    a = svc.submit("alice", 1, 1000, work(0.1, until=release_a))["id"]
    assert wait_for(lambda: slurm_job(ex, a).get("JobState") == "RUNNING", HANG)
    assert slurm_job(ex, a)["NodeList"] == ex.nodes[0]
    bj = svc.submit("bob", 5, 500, work(0.1, until=release_b))
    assert bj["node"] == 0 and bj["transfers"] == [{"job": a, "amount": 500.0}]
    assert wait_for(lambda: slurm_job(ex, a).get("JobState") == "SUSPENDED", HANG)
    assert wait_for(lambda: slurm_job(ex, bj["id"]).get("JobState") == "RUNNING", HANG)
    assert slurm_job(ex, bj["id"])["NodeList"] == ex.nodes[0]
    assert svc.status("admin", True)["nodes"][0]["host"] == ex.nodes[0]
    release_b.touch()
    assert wait_for(lambda: svc.job("admin", True, bj["id"])["state"] == "completed", HANG)
    assert wait_for(lambda: slurm_job(ex, a).get("JobState") == "RUNNING", HANG)  # resumed (after Slurm's 2 s gap)
    assert [e["kind"] for e in svc.job("admin", True, a)["events"]] == ["node", "start", "preempt", "resume"]
    release_a.touch()
    assert wait_for(lambda: svc.job("admin", True, a)["state"] == "completed", HANG)
    r = replay_recorded(b.store)
    live, sim = r["live"], r["simulated"]
    assert live["node"] == sim["node"] == [0, 0]
    assert live["preemptions"] == sim["preemptions"] == [1, 0]
    assert live["first_start"][:2] == sim["first_start"][:2]
    assert live["paid"] == sim["paid"] == {"alice": -500 * MICRO, "bob": 500 * MICRO}
    assert {j for j, f, *_ in r["differ"]} == {a, bj["id"]}  # both ended before their reported times
    b.store.check_books()


def test_slots_must_equal_the_slurm_nodes(cluster, tmp_path):
    """A DLGM market on Slurm has one node per Slurm node: other --slots are refused, naming the
    nodes."""
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm")
    b = Broker(tmp_path / "market", MarketConfig(slots=len(ex.nodes) + 1, single_user=True))
    try:
        with pytest.raises(ValueError, match=f"serve it with --slots {len(ex.nodes)}"):
            DLGMService(b, False, executor=ex)
    finally:
        b.stop()
