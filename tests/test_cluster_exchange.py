"""The exchange on the multi-node Slurm cluster (scripts/cluster-up.sh: 4 nodes x 2 CPUs): two
providers, each selling a partition of its own (pa: node1, node2; pb: node3, node4), contracts
running on their provider's nodes only, and a node lost mid-contract, settled by the fault table
(docs/exchange.md, "Who is at fault").

Marked ``cluster`` (tests/conftest.py): run with ``pytest -m cluster -n 0``; skipped without the
cluster, except with ``MARKETSCHED_CLUSTER=1`` (CI), where that is a failure. Asserts recorded
facts only: Slurm's placement, the contracts' states and notes, the capacity recorded with each
clearing, the ledger.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from live_helpers import wait_for
from marketsched.exchange.core import Exchange, create_exchange, recorded_book
from marketsched.exchange.providers import provider_backends
from marketsched.exchange.store import FINAL_CONTRACT_STATES, ExchangeStore
from marketsched.platform.clock import WallClock
from marketsched.platform.jobfiles import read_state

HANG = 300.0  # waits end when their condition holds; this only guards against a hang
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cluster-up.sh"
PARTS = {"a": ("pa", {"node1", "node2"}), "b": ("pb", {"node3", "node4"})}


def cluster_up(*args: str) -> None:
    p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_two_providers_on_their_own_nodes_and_a_node_lost_mid_contract(multinode, tmp_path):
    """Providers a (partition pa) and b (pb) each sell one node of 4 CPU units; four users buy 2
    units each (2 CPUs: one cluster node's worth), so each provider runs two contracts, every
    job on its own provider's nodes. A third provider naming the default partition, which holds
    every node, is refused (Slurm's real partition table). A node of a's dies mid-contract: that
    contract fails (``NODE_FAIL``, the provider's side), a pays the penalty to its user, who pays
    nothing; the other contracts, b's and a's on its other node, run on and are delivered. The
    next clearing sells only the CPUs of a's partition that are up, b's capacity unchanged; after
    ``node-up`` a's capacity is back. Books exact."""
    tmp_path.chmod(0o755)  # Slurm enters the jobs' folders
    data = tmp_path / "ex"
    ran = tmp_path / "ran.log"
    ran.touch()
    ran.chmod(0o666)
    release = tmp_path / "release"
    epoch = time.time()
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=2, period_seconds=2, mechanism="k-pricing", k=0.5, penalty=1.0, epoch=epoch)
    ex = Exchange(store, WallClock(epoch), provider_backends(data, containment="none"))
    ex.single_user = True
    node = {}
    for name, (partition, _) in PARTS.items():
        ex.join(name, kind="slurm", partition=partition, checked=True)
        node[name] = ex.add_node(name, "n", 4, 1000, checked=True)
    with pytest.raises(ValueError, match="shares node\\(s\\) node1, node2 with Slurm partition 'pa', which another "
                                         "provider, 'a', sells"):
        ex.join("c", kind="slurm", checked=True)
    s = ex.slot()
    ex.submit_offer("a", "n", 1, s + 1, s + 200)
    ex.submit_offer("b", "n", 2, s + 1, s + 200)
    cmd = (f'echo "$MARKETSCHED_CONTRACT $(hostname)" >> {ran}; '
           f"while [ ! -e {release} ]; do sleep 0.2; done")
    reqs = [ex.submit_request(f"u{i}", 9 - i, 2, 10, s + 3, s + 90, cmd) for i in range(4)]
    dead = None

    def step_until(pred):
        return wait_for(lambda: (ex.tick(), pred())[1], timeout=HANG, every=0.1)

    def hosts():  # contract id -> the hostname its job's command printed
        return {int(c): h for c, h in (line.split() for line in ran.read_text().splitlines())}

    try:
        assert step_until(lambda: len(store.contracts()) == 4 and len(hosts()) == 4), store.contracts()
        contracts = {c["id"]: c for c in store.contracts()}
        assert sorted(c["provider"] for c in contracts.values()) == ["a", "a", "b", "b"]
        for cid, host in hosts().items():  # each job runs on its own provider's nodes only
            assert host in PARTS[contracts[cid]["provider"]][1], (cid, host, contracts[cid])
        victim = min(cid for cid, c in contracts.items() if c["provider"] == "a")
        slurm_id = read_state(data / "providers" / "a", victim)["pid"]
        dead = ex.backend("a").executor.show(slurm_id)["NodeList"]
        assert dead == hosts()[victim]
        cut = len(store.periods())
        cluster_up("node-down", dead)
        assert step_until(lambda: store.contract(victim)["state"] in FINAL_CONTRACT_STATES)
        assert [c["state"] for c in store.contracts() if c["id"] != victim] == ["running"] * 3
        # a clearing after Slurm declared the node down sells only pa's CPUs that are up
        assert step_until(lambda: any(recorded_book(store, p["id"]).caps.get(node["a"]) == 2
                                      for p in store.periods()[cut:]))
        down = next(p["id"] for p in store.periods()[cut:] if recorded_book(store, p["id"]).caps.get(node["a"]) == 2)
        assert "too few CPUs up now: sells 2 of its 4 CPU units" in recorded_book(store, down).why[node["a"]]
        cluster_up("node-up", dead)
        assert step_until(lambda: any(recorded_book(store, p["id"]).caps.get(node["a"]) == 4
                                      for p in store.periods() if p["id"] > down))
        release.touch()
        assert step_until(lambda: all(c["state"] in FINAL_CONTRACT_STATES for c in store.contracts()))
    finally:
        release.touch()
        for c in store.contracts(("starting", "running")):  # a failed test leaves nothing running
            ex.backend(c["provider"]).stop(c["id"])
        ex.close()
        if dead is not None:
            cluster_up("node-up", dead)
    for p in store.periods():  # b's capacity never changed
        caps = recorded_book(store, p["id"]).caps
        assert caps.get(node["b"], 4) == 4
    got = {c["id"]: c for c in store.contracts()}
    assert sorted(c["request_id"] for c in got.values()) == sorted(reqs)
    v = got[victim]
    assert v["state"] == "failed" and "slurm: NODE_FAIL" in v["note"], v
    assert v["penalty"] == v["user_price"] > 0
    for cid, c in got.items():
        entries = [(e["kind"], e["amount"]) for e in store.ledger.entries() if e["job_id"] == cid]
        if cid == victim:  # the provider pays the penalty; its user pays nothing
            assert entries == [("penalty", c["penalty"])]
        else:
            assert c["state"] == "delivered" and c["note"].startswith("the job exited by itself"), c
            assert entries == [("user-price", c["user_price"]), ("provider-price", c["provider_price"])]
    balances = store.balances()
    for name in PARTS:
        mine = [c for c in got.values() if c["provider"] == name]
        assert balances[f"provider:{name}"] == sum(c["provider_price"] for c in mine if c["state"] == "delivered") \
            - sum(c["penalty"] for c in mine if c["state"] == "failed")
    assert balances[f"user:{v['user']}"] == v["penalty"]
    books = store.check_books()
    assert books["penalties"] == v["penalty"]
