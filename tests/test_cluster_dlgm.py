"""DLGM on the multi-node Slurm cluster (scripts/cluster-up.sh 4: four nodes x 2 CPUs): each
DLGM node is a Slurm node, jobs choose their node by DLGM's rule and run there (``sbatch -w``),
and the compensations are the simulator's on the recorded run.

Marked ``cluster`` (tests/conftest.py): run with ``pytest -m cluster -n 0``; skipped without the
cluster, except with ``MARKETSCHED_CLUSTER=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import pytest

from live_helpers import slurm_cancel_and_wait, wait_for, work
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dlgm_service import DLGMService, replay_recorded
from marketsched.live.dlgm_slurm import DLGMSlurmExecutor
from marketsched.platform.ledger import MICRO

HANG = 300.0  # waits end when their condition holds; this only guards against a hang


@pytest.fixture
def dlgm_cluster(multinode, tmp_path):
    ex = DLGMSlurmExecutor(tmp_path / "market" / "dlgm")
    b = Broker(tmp_path / "market", MarketConfig(slots=len(ex.nodes), single_user=True)).start()
    b.ensure_admin()
    b.dlgm = DLGMService(b, False, executor=ex).start()
    yield b, ex
    b.stop(kill_jobs=True)
    slurm_cancel_and_wait(ex.job_name(0)[:-1], HANG)


def test_dlgm_node_choice_across_slurm_nodes_and_compensations_equal_the_simulator(dlgm_cluster, tmp_path):
    """Four nodes. A1..A4 (weight 1, reported 100, 200, 300, 400 s) take the four idle nodes in
    order, each on its own Slurm node. B (weight 1, 100 s) queues where the running job ends
    first: node 0. C (weight 4, 10 s: ratio 0.4 above B's 0.01) is best off on node 0 too,
    ahead of B, and pays B's owner 1 * 10 (elsewhere it would wait some 100 s more). Released,
    node 0 runs A1, C, B, all on its Slurm node. The recorded run replays through the simulator
    to the same nodes and money (the jobs end before their reported times, which it says)."""
    b, ex = dlgm_cluster
    svc = b.dlgm
    assert len(ex.nodes) == 4
    for u in ("alice", "bob", "carol"):
        b.add_user(True, u, 100)
    go = tmp_path / "go"
    cmd = work(0.1, until=go)
    a = [svc.submit("alice", 1, 100 * (i + 1), cmd) for i in range(4)]
    assert [x["node"] for x in a] == [0, 1, 2, 3]
    assert wait_for(lambda: all((ex.show(ex.recorded(x["id"])[0]) or {}).get("JobState") == "RUNNING" for x in a), HANG)
    assert [ex.show(ex.recorded(x["id"])[0])["NodeList"] for x in a] == ex.nodes
    bj = svc.submit("bob", 1, 100, cmd)
    c = svc.submit("carol", 4, 10, cmd)
    assert (bj["node"], bj["transfers"]) == (0, [])
    assert (c["node"], c["transfers"]) == (0, [{"job": bj["id"], "amount": 10.0}])
    assert [q["id"] for q in svc.status("admin", True)["nodes"][0]["queue"]] == [c["id"], bj["id"]]
    go.touch()
    ids = [x["id"] for x in a] + [bj["id"], c["id"]]
    assert wait_for(lambda: all(svc.job("admin", True, j)["state"] == "completed" for j in ids), HANG)
    for j in (bj["id"], c["id"]):  # Slurm keeps an ended job's record for MinJobAge (300 s)
        assert ex.show(ex.recorded(j)[0])["NodeList"] == ex.nodes[0]
    r = replay_recorded(b.store)
    live, sim = r["live"], r["simulated"]
    assert live["node"] == sim["node"] == [0, 1, 2, 3, 0, 0]
    assert live["paid"] == sim["paid"] == {"alice": 0, "bob": -10 * MICRO, "carol": 10 * MICRO}
    assert {j for j, f, *_ in r["differ"]} <= set(ids)
    b.store.check_books()
