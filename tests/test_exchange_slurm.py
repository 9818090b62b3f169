"""A Slurm partition as a provider of the exchange, beside a local provider: contracts run as
Slurm batch jobs inside their windows, are cancelled at their window's end, and a contract
whose Slurm job is cancelled by someone else (the provider's failure) pays its penalty. Runs
when Slurm answers (MARKETSCHED_SLURM=1 makes a missing cluster a failure). Asserts recorded
facts only: the jobs' own timestamps and provider, contract states, the ledger."""

from __future__ import annotations

import time

from live_helpers import wait_for
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.providers import provider_backends
from marketsched.exchange.store import FINAL_CONTRACT_STATES, ExchangeStore
from marketsched.platform.clock import WallClock
from marketsched.platform.jobfiles import read_state
from marketsched.platform.slurm import run

HANG = 300.0  # a guard against a hang, not a timing claim


def test_a_slurm_partition_and_a_local_provider(cluster, tmp_path):
    tmp_path.chmod(0o755)  # Slurm enters the jobs' folders
    data = tmp_path / "ex"
    ran = tmp_path / "ran.log"
    ran.touch()
    ran.chmod(0o666)
    epoch = time.time()
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=2, period_seconds=2, mechanism="k-pricing", k=0.5, penalty=1.0, epoch=epoch)
    ex = Exchange(store, WallClock(epoch), provider_backends(data, containment="none"))
    ex.single_user = True
    ex.join("cluster", kind="slurm")
    ex.add_node("cluster", "main", 2, 100)
    ex.join("box")
    ex.add_node("box", "n0", 1, 100, cpus=[0])
    s = ex.slot()
    ex.submit_offer("cluster", "main", 3, s + 2, s + 100)  # cheaper: the greedy fills it first
    ex.submit_offer("box", "n0", 4, s + 2, s + 100)
    stamp = f'echo "$MARKETSCHED_CONTRACT $MARKETSCHED_PROVIDER $(date +%s.%N)" >> {ran}'
    # generous windows (slots of 2 s): Slurm starts a job when its scheduler gets to it
    quick = ex.submit_request("u1", 9, 1, 10, s + 3, s + 14, stamp)
    victim = ex.submit_request("u3", 9, 1, 10, s + 3, s + 20, f"{stamp}; sleep 300")
    boxed = ex.submit_request("u2", 8, 1, 10, s + 3, s + 4, f"{stamp}; sleep 300")  # stopped at its window's end

    def by_request(rid):
        return [c for c in store.contracts() if c["request_id"] == rid]

    def step_until(pred):
        return wait_for(lambda: (ex.tick(), pred())[1], timeout=HANG, every=0.1)

    try:
        assert step_until(lambda: by_request(victim) and by_request(victim)[0]["state"] == "running"
                          and stamp_of(ran, by_request(victim)[0]["id"]) is not None)
        (v,) = by_request(victim)
        assert v["provider"] == "cluster"
        slurm_id = read_state(data / "providers" / "cluster", v["id"])["pid"]
        run(["scancel", str(slurm_id)])  # the provider's cluster drops the job
        assert step_until(lambda: all(c["state"] in FINAL_CONTRACT_STATES for c in store.contracts())
                          and all(o["state"] != "open" for o in store.orders("request")))
    finally:
        for c in store.contracts(("starting", "running")):  # a failed test leaves nothing running
            ex.backend(c["provider"]).stop(c["id"])
        ex.close()
    contracts = {c["request_id"]: c for c in store.contracts()}
    assert set(contracts) == {quick, boxed, victim}
    assert contracts[quick]["provider"] == "cluster" and contracts[boxed]["provider"] == "box"
    assert contracts[quick]["state"] == "delivered" and contracts[quick]["note"].startswith("the job exited by itself")
    assert contracts[boxed]["state"] == "delivered" and contracts[boxed]["note"].startswith("served its whole window")
    v = contracts[victim]
    assert v["state"] == "failed" and v["penalty"] == v["user_price"] > 0
    for c in (contracts[quick], v):  # each job's own record: it ran on its provider, not before its window
        provider, t = stamp_of(ran, c["id"])
        assert provider == c["provider"] and epoch + c["start_t"] <= t
    if stamp_of(ran, contracts[boxed]["id"]) is not None:
        assert epoch + contracts[boxed]["start_t"] <= stamp_of(ran, contracts[boxed]["id"])[1]
    assert store.balances()["provider:cluster"] == contracts[quick]["provider_price"] - v["penalty"]
    store.check_books()


def stamp_of(path, contract_id):
    for line in path.read_text().splitlines():
        cid, provider, t = line.split()
        if int(cid) == contract_id:
            return provider, float(t)
    return None


def test_a_slurm_contract_gets_its_share_and_the_users_own_end_pays_the_provider(cluster, accounts, open_dir):
    """A Slurm contract runs as its user's account with ``--cpus-per-task`` = its share of the
    partition's CPUs; whatever the job does to itself (``exit 200``, ``kill -9 $$``, ``scancel``
    of its own job) is the user's outcome: the provider is paid (before: a penalty for each)."""
    data = open_dir / "ex"
    epoch = time.time()
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=2, period_seconds=2, mechanism="pay-as-bid", penalty=1.0, epoch=epoch)
    ex = Exchange(store, WallClock(epoch), provider_backends(data, containment="none"))
    ex.single_user = False
    store.set_unix("alice", accounts[0])
    ex.join("cluster", kind="slurm")
    ex.add_node("cluster", "main", 4, 1000)  # 4 units on the partition's CPUs: a unit is a quarter of them
    s = ex.slot()
    ex.submit_offer("cluster", "main", 1, s + 2, s + 100)
    reqs = {"exit 200": ex.submit_request("alice", 9, 2, 10, s + 3, s + 30, "echo $SLURM_CPUS_PER_TASK > cpus; exit 200"),
            "kill -9 $$": ex.submit_request("alice", 9, 1, 10, s + 3, s + 30, "kill -9 $$"),
            "scancel": ex.submit_request("alice", 9, 1, 10, s + 3, s + 30, "scancel $SLURM_JOB_ID; sleep 60")}

    def contract(rid):
        got = [c for c in store.contracts() if c["request_id"] == rid]
        return got[0] if got else None

    try:
        assert wait_for(lambda: (ex.tick(), all(contract(r) and contract(r)["state"] in FINAL_CONTRACT_STATES
                                                 for r in reqs.values()))[1], timeout=HANG, every=0.1), \
            {k: contract(r) for k, r in reqs.items()}
    finally:
        for c in store.contracts(("starting", "running")):
            ex.backend(c["provider"]).stop(c["id"])
        ex.close()
    partition = ex.backend("cluster").executor.partition_cpus()
    got = {k: contract(r) for k, r in reqs.items()}
    for k, c in got.items():
        assert c["state"] == "delivered", (k, c["note"], c)
        entries = [(e["kind"], e["amount"]) for e in store.ledger.entries() if e["job_id"] == c["id"]]
        assert entries == [("user-price", c["user_price"]), ("provider-price", c["provider_price"])]
    assert got["exit 200"]["exit_code"] == 200
    cpus = data / "providers" / "cluster" / f"job-{got['exit 200']['id']}" / "cpus"
    assert int(cpus.read_text()) == partition // 2  # 2 of 4 units: half the partition's CPUs
    assert store.check_books()["penalties"] == 0
