"""The live market on a multi-node Slurm cluster (scripts/cluster-up.sh: 4 nodes x 2 CPUs, each
node a slurmd with its own hostname and address in its own namespaces): every CPU of every node
used, preemption of the lowest bid wherever it runs, a suspended job resumed only where its node
has room, a node that dies mid-job and comes back, the broker killed -9 with jobs on every node,
the controller restarted mid-run.

Marked ``cluster`` (tests/conftest.py): run with ``pytest -m cluster -n 0``; skipped without the
cluster, except with ``MARKETSCHED_CLUSTER=1`` (CI), where that is a failure.
"""

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from live_helpers import free_port, slurm_broker, wait_for, work
from live_helpers import slurm_cancel_and_wait as cancel_and_wait
from marketsched.live.broker import Broker, MarketConfig, capacity_changes
from marketsched.live.replay import simulate_recorded
from marketsched.platform.slurm import SlurmExecutor, run

STEP = 0.2
HANG = 300.0  # waits end when their condition holds; this only guards against a hang
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cluster-up.sh"


def cluster_up(*args: str) -> None:
    p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


@pytest.fixture
def market(multinode, tmp_path):
    brokers = []

    def make(**cfg):
        cfg.setdefault("executor", "slurm")
        cfg.setdefault("charge_interval", 0.2)
        cfg.setdefault("slots", SlurmExecutor(tmp_path / "probe").cpus)
        b = Broker(tmp_path / "market", MarketConfig(**{"single_user": True, **cfg})).start()
        b.ensure_admin()
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        if not b._stopping:
            b.stop(kill_jobs=True)
        cancel_and_wait(b.executor.job_name(0)[:-1])


def info(b, job_id) -> dict:
    return b.executor.show(b.executor.recorded(job_id)[0]) or {}


def node_of(b, job_id) -> str:
    return info(b, job_id).get("NodeList", "")


def state(b, job_id) -> str:
    return b.job("admin", True, job_id)["state"]


def running_per_node() -> Counter:
    """Slurm's running jobs per node (a serial job's NodeList is one node)."""
    return Counter(run(["squeue", "-h", "-t", "R", "-o", "%N"]).split())


def books_exact(b, jobs, bids, slots, rule="hb", pricing="kth", estimates=None):
    """The ledger is the mechanism's rule on the recorded sequence (with the market's recorded
    capacity changes: nodes down and back, and each job's CPUs); double entry holds."""
    rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], bids, slots,
                            rule, pricing, runtime_estimate=estimates,
                            capacity_changes=capacity_changes(b.store), procs=[j["procs"] for j in jobs])
    np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"])
    assert books["revenue"] == pytest.approx(sum(j["charged"] for j in jobs), abs=1e-6)
    return rec


def test_the_cluster_is_four_nodes_in_their_own_namespaces(multinode):
    # the default partition, main, has every node (sinfo -N lists a node once per partition)
    nodes = run(["sinfo", "-h", "-N", "-p", "main", "-o", "%N %c %t"]).split("\n")
    assert sorted(line.split()[0] for line in nodes if line) == multinode
    # one job step per node: each answers with its own hostname (UTS namespace) and address
    out = run(["srun", "-N", str(len(multinode)), "-t", "1", "sh", "-c",
               "echo $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}')"])
    got = sorted(out.split("\n")[:-1])
    assert got == [f"node{i} 10.231.0.{10 + i}/24" for i in range(1, len(multinode) + 1)]


def test_the_market_uses_every_cpu_of_every_node(market, multinode, tmp_path):
    b = market()
    n = b.config.slots
    assert n == 2 * len(multinode)
    b.add_user(True, "alice", 10_000)
    release = tmp_path / "release"
    ids = [b.submit("alice", False, 2.0 + i, "hostname; " + work(0.4, f"j{i}", step=STEP, until=release))["id"]
           for i in range(n)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in ids), HANG)
    nodes = {j: node_of(b, j) for j in ids}
    assert Counter(nodes.values()) == {name: 2 for name in multinode}  # every CPU of every node
    release.touch()
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), HANG)
    for j in ids:  # each ran where Slurm says: its node's own hostname
        assert b.job("admin", True, j)["stdout"].split("\n")[0] == nodes[j]
    jobs = [b.job("admin", True, j) for j in ids]
    books_exact(b, jobs, [2.0 + i for i in range(n)], n)


def test_preemption_picks_the_lowest_bid_cluster_wide_and_resumes_it_on_its_node(market, tmp_path):
    """Eight jobs with bids in a shuffled order fill the four nodes; a higher bid preempts the
    lowest bid wherever it runs, starts on that node's freed CPU. Then a CPU frees on another node:
    the mechanism resumes the victim (its model: resume on any processor), but Slurm can resume it
    only on its own node, which is full: the market waits (it never oversubscribes a node) and
    resumes it when the preemptor ends."""
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    bids = [5.0, 3.0, 8.0, 1.5, 6.0, 7.0, 2.5, 4.0]
    rel = {i: tmp_path / f"release{i}" for i in range(n)}
    low = [b.submit("alice", False, bid, work(0.6, f"low{i}", step=STEP, until=rel[i]))["id"]
           for i, bid in enumerate(bids)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in low), HANG)
    time.sleep(0.5)
    victim_i = int(np.argmin(bids))
    victim = low[victim_i]
    vnode = node_of(b, victim)
    high_release = tmp_path / "high-release"
    high = b.submit("bob", False, 10.0, work(1.0, "high", step=STEP, until=high_release))["id"]
    st = {j["id"]: j["state"] for j in b.jobs("admin", True)}
    assert st[victim] == "preempted" and st[high] == "running"
    assert all(st[j] == "running" for j in low if j != victim)
    assert wait_for(lambda: info(b, victim).get("JobState") == "SUSPENDED", HANG)
    assert wait_for(lambda: info(b, high).get("JobState") == "RUNNING", HANG)
    assert node_of(b, high) == vnode  # the only free CPU was the victim's
    # a job on another node ends: the mechanism resumes the victim at once ...
    other_i = next(i for i, j in enumerate(low) if i != victim_i and node_of(b, j) != vnode)
    rel[other_i].touch()
    assert wait_for(lambda: state(b, low[other_i]) == "completed", HANG)
    assert state(b, victim) == "running"
    # ... but Slurm keeps it suspended on its full node for several of the executor's polls
    for _ in range(10):
        time.sleep(b.executor.poll)
        assert info(b, victim).get("JobState") == "SUSPENDED"
        assert all(c <= 2 for c in running_per_node().values()), running_per_node()
    high_release.touch()
    assert wait_for(lambda: info(b, victim).get("JobState") == "RUNNING", HANG)
    assert node_of(b, victim) == vnode
    for p in rel.values():
        p.touch()
    ids = low + [high]
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), HANG)
    jobs = [b.job("admin", True, j) for j in ids]
    assert [j["exit_code"] for j in jobs] == [0] * (n + 1)
    v = b.job("admin", True, victim)
    assert v["preemptions"] == 1 and [e["kind"] for e in v["events"]].count("resume") == 1
    books_exact(b, jobs, bids + [10.0], n)


@pytest.mark.parametrize("rule, pricing", [("nphb", "kth"), ("wsept", "first"), ("hb", "first")])
def test_each_mechanism_decides_on_the_cluster_as_the_simulator(market, rule, pricing, tmp_path):
    """Eight jobs fill the four nodes; then ``top`` (bid 9, estimate 100 s: the highest bid, the
    lowest bid per second) and ``quick`` (bid 2, estimate 1 s: a low bid, the highest per second)
    arrive, and a job on a node other than the lowest bid's ends. The mechanisms differ:
    HB preempts the lowest running bid (1.5) for ``top`` at once, on that job's node (Slurm
    suspends it there), then starts ``quick`` (2 > 1.5) on the freed CPU; NPHB preempts nothing
    and starts ``top`` (highest bid) on the freed CPU; WSEPT preempts nothing and starts
    ``quick`` (highest bid / estimate). The books equal the simulator's replay of the run."""
    b = market(mechanism=rule, pricing=pricing)
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    bids = [5.0, 3.0, 8.0, 1.5, 6.0, 7.0, 2.5, 4.0]
    est = [10.0] * n + [100.0, 1.0]
    rel = {i: tmp_path / f"release{i}" for i in range(n + 2)}
    fill = [b.submit("alice", False, bid, work(0.4, f"f{i}", step=STEP, until=rel[i]), estimate=est[i])["id"]
            for i, bid in enumerate(bids)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in fill), HANG)
    nodes = {j: node_of(b, j) for j in fill}
    lowest = fill[int(np.argmin(bids))]
    top = b.submit("alice", False, 9.0, work(0.4, "top", step=STEP, until=rel[n]), estimate=est[n])["id"]
    quick = b.submit("alice", False, 2.0, work(0.4, "quick", step=STEP, until=rel[n + 1]), estimate=est[n + 1])["id"]
    st = {j["id"]: j["state"] for j in b.jobs("admin", True)}
    if rule == "hb":  # the lowest bid cluster-wide is preempted, on its node
        assert st[lowest] == "preempted" and st[top] == "running" and st[quick] == "queued"
        assert wait_for(lambda: info(b, lowest).get("JobState") == "SUSPENDED", HANG)
        assert wait_for(lambda: info(b, top).get("JobState") == "RUNNING", HANG)
        assert node_of(b, top) == nodes[lowest]
    else:  # non-preemptive: both wait, every running job keeps its CPU
        assert st[top] == st[quick] == "queued" and all(st[j] == "running" for j in fill)
    # a job on another node than the lowest bid's ends: its CPU is the only free one
    other_i = next(i for i, j in enumerate(fill) if j != lowest and nodes[j] != nodes[lowest])
    rel[other_i].touch()
    assert wait_for(lambda: state(b, fill[other_i]) == "completed", HANG)
    starts = {"hb": quick, "nphb": top, "wsept": quick}[rule]
    waits = {"hb": lowest, "nphb": quick, "wsept": top}[rule]
    assert state(b, starts) == "running" and state(b, waits) == ("preempted" if rule == "hb" else "queued")
    assert wait_for(lambda: info(b, starts).get("JobState") == "RUNNING", HANG)
    assert node_of(b, starts) == nodes[fill[other_i]]  # where Slurm placed it: the freed CPU
    for p in rel.values():
        p.touch()
    ids = fill + [top, quick]
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), HANG)
    jobs = [b.job("admin", True, j) for j in ids]
    assert [j["exit_code"] for j in jobs] == [0] * (n + 2)
    assert [j["preemptions"] for j in jobs] == [int(rule == "hb" and j == lowest) for j in ids]
    books_exact(b, jobs, bids + [9.0, 2.0], n, rule, pricing, est)


def test_a_node_that_dies_mid_job_ends_its_jobs_and_is_used_again_when_it_returns(market, multinode, tmp_path):
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    release = tmp_path / "release"
    runs = tmp_path / "runs.log"
    runs.touch()
    ids = [b.submit("alice", False, 2.0 + i, f"echo start >> {runs}; " + work(0.4, f"j{i}", step=STEP, until=release))["id"]
           for i in range(n)]
    # the node dies once every job's command runs (not while slurmd is still setting a job up: a
    # login shell killed there can leave its start-up files' locks behind, as pyenv's)
    assert wait_for(lambda: runs.read_text().count("start") == n, HANG)
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in ids), HANG)
    nodes = {j: node_of(b, j) for j in ids}
    dead = nodes[ids[0]]
    lost = [j for j in ids if nodes[j] == dead]
    kept = [j for j in ids if nodes[j] != dead]
    assert len(lost) == 2
    try:
        killed = b.wall()
        cluster_up("node-down", dead)
        assert wait_for(lambda: all(state(b, j) == "failed" for j in lost), HANG)
        for j in lost:  # the job ends as Slurm reports it
            rec = b.job("admin", True, j)
            assert "slurm: NODE_FAIL" in rec["note"], rec["note"]
            assert info(b, j).get("JobState") == "NODE_FAIL"
            # charged and metered up to the node's failure as recorded, not up to Slurm's report:
            # eight jobs on eight CPUs, no queue, so the k-th price is the reservation price 1
            tf = [e["t"] for e in rec["events"] if e["kind"] == "node-failure"]
            assert len(tf) == 1 and tf[0] < rec["end_t"], (tf, rec["end_t"])
            assert rec["run_seconds"] == pytest.approx(tf[0] - rec["first_start"], abs=1e-9)
            assert rec["charged"] == pytest.approx(1.0 * rec["run_seconds"], abs=1e-6)
            print(f"job {j}: node killed at t={killed:.3f}, failure time {tf[0]:.3f}, Slurm's report {rec['end_t']:.3f}")
        charged = {j: b.job("admin", True, j)["charged"] for j in lost}
        assert all(state(b, j) == "running" for j in kept)
        time.sleep(5 * b.config.charge_interval)
        assert {j: b.job("admin", True, j)["charged"] for j in lost} == charged  # nothing after its end
    finally:
        cluster_up("node-up", dead)
    # the node is back in Slurm's service, and so the market's capacity is its slots again
    # (before, a high bid would preempt the lowest running ones instead, as on six CPUs)
    assert wait_for(lambda: b.engine.capacity == n, HANG)
    # the next two jobs can only go there (every other CPU is taken)
    again = [b.submit("alice", False, 20.0, work(0.4, f"again{i}", step=STEP, until=release))["id"] for i in range(2)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in again), HANG)
    assert {node_of(b, j) for j in again} == {dead}
    release.touch()
    assert wait_for(lambda: all(state(b, j) == "completed" for j in kept + again), HANG)
    order = ids + again
    jobs = [b.job("admin", True, j) for j in order]
    books_exact(b, jobs, [2.0 + i for i in range(n)] + [20.0, 20.0], n)


def test_kill_9_of_the_broker_with_jobs_on_every_node_reattaches_each_once(multinode, tmp_path):
    from marketsched.live.cli import Client
    from marketsched.platform.ledger import Store

    data = tmp_path / "market"
    runs = tmp_path / "runs.log"
    runs.touch()
    slots = SlurmExecutor(tmp_path / "probe").cpus
    probe = SlurmExecutor(data / "jobs")
    prefix = probe.job_name(0)[:-1]
    port = free_port()
    log = open(tmp_path / "broker.log", "ab")
    procs = []
    release = tmp_path / "release"

    def cmd(i):  # runs until the test releases it, after the restart
        return (f'echo "start $MARKETSCHED_JOB_ID $(hostname)" >> {runs}; while [ ! -e {release} ]; '
                f'do sleep {STEP}; done; echo "end $MARKETSCHED_JOB_ID" >> {runs}')

    try:
        procs.append(slurm_broker(data, port, log, slots))
        admin = Client(f"http://127.0.0.1:{port}", (data / "admin.token").read_text().strip())
        a = Client(admin.url, admin.post("/api/users", {"name": "a", "deposit": 10_000})["token"])
        ids = [a.post("/api/jobs", {"bid": 2.0 + i, "command": cmd(i)})["id"] for i in range(slots + 2)]
        assert wait_for(lambda: runs.read_text().count("start") >= slots, HANG)
        started = {line.split()[1]: line.split()[2] for line in runs.read_text().splitlines()}
        assert sorted(Counter(started.values())) == multinode  # jobs on every node
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        procs.append(slurm_broker(data, port, log, slots))
        release.touch()
        assert wait_for(lambda: all(j["state"] == "completed" for j in admin.get("/api/jobs")), HANG), \
            admin.get("/api/jobs")
        jobs = admin.get("/api/jobs")
        assert sorted(j["id"] for j in jobs) == sorted(ids)
        text = runs.read_text().split("\n")
        for i in ids:  # each ran exactly once (Slurm kept the processes across the crash)
            assert sum(line.startswith(f"start {i} ") for line in text) == 1, (i, text)
            assert text.count(f"end {i}") == 1, (i, text)
        procs[-1].send_signal(signal.SIGTERM)
        procs[-1].wait(timeout=HANG)
        store = Store(data)
        books = store.check_books()
        assert books["users"] + books["revenue"] == books["deposits"] == 10_000 * 1_000_000
        reattached = Counter(e["job_id"] for e in store.events() if e["kind"] == "reattach")
        # every job running at the crash, on every node, re-attached exactly once
        assert {int(k) for k in started} <= set(reattached) and set(reattached.values()) == {1}, reattached
        store.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
        cancel_and_wait(prefix)


def test_a_controller_restarted_mid_run_is_reconciled(market, tmp_path):
    """slurmctld stopped while the market's jobs run on every node, started again from its saved
    state: the market keeps running through the outage (Slurm commands fail meanwhile), then
    finds its jobs where they were; each runs once, books exact."""
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    release = tmp_path / "release"
    runs = tmp_path / "runs.log"
    ids = [b.submit("alice", False, 2.0 + i, f"echo start >> {runs}; " + work(0.4, f"j{i}", step=STEP, until=release))["id"]
           for i in range(n)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in ids), HANG)
    # stopped (SIGTERM: it saves its state; after a kill -9 it would lose the jobs of the last
    # seconds, whose state it had not saved yet, and purge them from their nodes at the restart)
    pid = int(Path("/run/slurm-cluster/slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    assert wait_for(lambda: not Path(f"/proc/{pid}").exists(), HANG)
    time.sleep(2.0)  # the market polls meanwhile: every Slurm command fails
    assert subprocess.run(["scontrol", "ping"], capture_output=True).returncode != 0
    cluster_up("4")  # the same configuration: slurmctld recovers its jobs
    assert [state(b, j) for j in ids] == ["running"] * n, [b.job("admin", True, j)["note"] for j in ids]
    assert [info(b, j).get("JobState") for j in ids] == ["RUNNING"] * n
    release.touch()
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), HANG)
    jobs = [b.job("admin", True, j) for j in ids]
    assert [j["exit_code"] for j in jobs] == [0] * n
    assert runs.read_text().count("start") == n
    books_exact(b, jobs, [2.0 + i for i in range(n)], n)


def test_a_node_down_shrinks_the_market_lowest_bids_stop_unpaid_and_it_grows_back(market, multinode, tmp_path):
    """Eight jobs fill the cluster; a node dies (its two jobs fail): the market's capacity is the
    six CPUs Slurm can still run on. Two more jobs arrive, one bid above every running one, one
    below: HB preempts exactly the lowest running bid for the first, the second waits; every job
    the market shows running is one Slurm runs, and no job is charged while Slurm would hold it
    pending. The node comes back: the capacity is eight again and the waiting job starts there."""
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    bids = [5.0, 3.0, 8.0, 1.5, 6.0, 7.0, 2.5, 4.0]
    rel = {i: tmp_path / f"release{i}" for i in range(n + 2)}
    runs = tmp_path / "runs.log"
    runs.touch()
    ids = [b.submit("alice", False, bid, f"echo start >> {runs}; " + work(0.4, f"j{i}", step=STEP, until=rel[i]))["id"]
           for i, bid in enumerate(bids)]
    assert wait_for(lambda: runs.read_text().count("start") == n, HANG)
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in ids), HANG)
    nodes = {j: node_of(b, j) for j in ids}
    victim_i = min((i for i in range(n) if nodes[ids[i]] != nodes[ids[2]]), key=lambda i: bids[i])
    dead = nodes[ids[2]]  # the node of the highest bid: the lowest survives it
    lost = [j for j in ids if nodes[j] == dead]
    try:
        cluster_up("node-down", dead)
        assert wait_for(lambda: all(state(b, j) == "failed" for j in lost), HANG)
        assert b.engine.capacity == n - 2  # in the batch of the failures (same poll)
        high = b.submit("alice", False, 9.0, work(0.4, "high", step=STEP, until=rel[n]))["id"]
        low = b.submit("alice", False, 1.0, work(0.4, "low", step=STEP, until=rel[n + 1]))["id"]
        st = {j["id"]: j["state"] for j in b.jobs("admin", True)}
        # exactly the lowest bids are stopped: the lowest running one preempted, the new low one waits
        assert st[ids[victim_i]] == "preempted" and st[low] == "queued" and st[high] == "running"
        assert sorted(j for j, s in st.items() if s == "running") == sorted(
            [j for j in ids if j not in lost and j != ids[victim_i]] + [high])
        assert wait_for(lambda: info(b, high).get("JobState") == "RUNNING", HANG)
        assert wait_for(lambda: info(b, ids[victim_i]).get("JobState") == "SUSPENDED", HANG)
        for _ in range(5):  # a job the market shows running is one Slurm runs; no charge while waiting
            time.sleep(b.config.charge_interval)
            for j in b.jobs("admin", True):
                if j["state"] == "running":
                    assert info(b, j["id"]).get("JobState") == "RUNNING", j
            assert b.job("admin", True, low)["charged"] == 0
            assert all(c <= 2 for c in running_per_node().values()), running_per_node()
        rel[n].touch()  # the preemptor ends: the victim resumes on its own node (a CPU frees there)
        assert wait_for(lambda: info(b, ids[victim_i]).get("JobState") == "RUNNING", HANG)
        assert state(b, low) == "queued" and b.job("admin", True, low)["charged"] == 0
    finally:
        cluster_up("node-up", dead)
    # the node is back: the capacity grows to eight and the waiting job starts, on that node
    assert wait_for(lambda: b.engine.capacity == n and state(b, low) == "running", HANG)
    assert wait_for(lambda: info(b, low).get("JobState") == "RUNNING", HANG)
    assert node_of(b, low) == dead
    assert [c for _, c in capacity_changes(b.store)] == [n - 2, n]
    for p in rel.values():
        p.touch()
    kept = [j for j in ids if j not in lost]
    assert wait_for(lambda: all(state(b, j) == "completed" for j in kept + [high, low]), HANG)
    order = ids + [high, low]
    jobs = [b.job("admin", True, j) for j in order]
    books_exact(b, jobs, bids + [9.0, 1.0], n)


def test_a_four_cpu_job_runs_over_two_nodes_pays_four_times_and_is_suspended_whole(market, multinode, tmp_path):
    """A 4-CPU job (bid 2) runs as 4 Slurm tasks over two nodes of 2 CPUs; four serial jobs
    (bid 5) fill the other two nodes. It pays 4 times a serial job's price per second. A higher
    bid (9, 1 CPU) preempts it whole: every task on both nodes stops (SIGSTOP: state T), and it
    waits whole (3 CPUs idle) until its two nodes have room again; the books are the replay's."""
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    release = tmp_path / "release"
    task = f"echo $(hostname) $$ > task.$SLURM_PROCID; {work(0.6, 'w', step=STEP, until=release)}"
    wide = b.submit("alice", False, 2.0, f"srun -n 4 sh -c '{task}'", procs=4)["id"]
    folder = b.executor.workdir(wide)
    files = [folder / f"task.{i}" for i in range(4)]
    assert wait_for(lambda: all(f.exists() and f.read_text().count(" ") == 1 for f in files), HANG)
    tasks = [f.read_text().split() for f in files]  # (hostname, pid) of each task
    nodes = run(["scontrol", "show", "hostnames", node_of(b, wide)]).split()
    assert len(nodes) == 2 and sorted({h for h, _ in tasks}) == sorted(nodes)  # where Slurm placed them
    serial = [b.submit("alice", False, 5.0, work(0.6, f"s{i}", step=STEP, until=release))["id"]
              for i in range(n - 4)]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in serial), HANG)
    rates = {j: b.job("admin", True, j)["rate"] for j in [wide, *serial]}
    assert rates[wide] == pytest.approx(4 * rates[serial[0]]) and rates[wide] > 0
    high = b.submit("bob", False, 9.0, work(0.6, "high", step=STEP, until=release))["id"]
    st = {j["id"]: j["state"] for j in b.jobs("admin", True)}
    assert st[wide] == "preempted" and st[high] == "running" and all(st[j] == "running" for j in serial)
    assert b.job("admin", True, wide)["rate"] == 0
    assert wait_for(lambda: info(b, wide).get("JobState") == "SUSPENDED", HANG)

    def stopped(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
        except FileNotFoundError:
            return False

    assert wait_for(lambda: all(stopped(pid) for _, pid in tasks), HANG)  # every task, on both nodes
    assert wait_for(lambda: info(b, high).get("JobState") == "RUNNING", HANG)
    release.touch()
    assert wait_for(lambda: all(state(b, j) == "completed" for j in [wide, high, *serial]), HANG)
    jobs = [b.job("admin", True, j) for j in [wide, *serial, high]]
    assert [j["procs"] for j in jobs] == [4] + [1] * (n - 4) + [1]
    assert all(j["stdout"].count("done w") == 4 for j in jobs[:1])  # each of the 4 tasks ran to its end
    books_exact(b, jobs, [2.0] + [5.0] * (n - 4) + [9.0], n)


def test_a_restartable_job_whose_node_is_full_restarts_on_another_node(market, tmp_path):
    """As the preemption test above, with the victim submitted ``restartable``: when a CPU frees
    on another node, the mechanism resumes it and, its own node being full, the executor
    requeues it: it starts again from the beginning on the node with the free CPU (its output
    shows two starts, on two nodes; Slurm counts a restart), the job's events say ``restart``,
    and the books equal the replay (what it ran before the restart stays charged)."""
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    bids = [5.0, 3.0, 8.0, 1.5, 6.0, 7.0, 2.5, 4.0]
    victim_i = int(np.argmin(bids))
    rel = {i: tmp_path / f"release{i}" for i in range(n)}
    low = [b.submit("alice", False, bid, "echo start $(hostname); " + work(0.6, f"low{i}", step=STEP, until=rel[i]),
                    restartable=i == victim_i)["id"] for i, bid in enumerate(bids)]
    victim = low[victim_i]
    assert wait_for(lambda: all(info(b, j).get("JobState") == "RUNNING" for j in low), HANG)
    assert wait_for(lambda: "start" in b.job("admin", True, victim)["stdout"], HANG)
    vnode = node_of(b, victim)
    high_release = tmp_path / "high-release"
    high = b.submit("bob", False, 10.0, work(1.0, "high", step=STEP, until=high_release))["id"]
    assert state(b, victim) == "preempted"
    assert wait_for(lambda: info(b, victim).get("JobState") == "SUSPENDED", HANG)
    assert wait_for(lambda: info(b, high).get("JobState") == "RUNNING", HANG)
    assert node_of(b, high) == vnode  # the victim's node is full again
    other_i = next(i for i, j in enumerate(low) if i != victim_i and node_of(b, j) != vnode)
    other_node = node_of(b, low[other_i])
    rel[other_i].touch()  # a CPU frees on another node: the victim restarts there
    assert wait_for(lambda: info(b, victim).get("JobState") == "RUNNING" and node_of(b, victim) == other_node, HANG)
    assert info(b, victim).get("Restarts") == "1" and state(b, victim) == "running"
    assert wait_for(lambda: b.job("admin", True, victim)["stdout"].count("start") == 2, HANG)
    assert b.job("admin", True, victim)["stdout"].split("\n")[:2] == [f"start {vnode}", f"start {other_node}"]
    for p in [*rel.values(), high_release]:
        p.touch()
    ids = low + [high]
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), HANG)
    v = b.job("admin", True, victim)
    assert v["restartable"] == 1 and [e["kind"] for e in v["events"]].count("restart") == 1
    assert all(b.job("admin", True, j)["restartable"] == 0 for j in ids if j != victim)
    jobs = [b.job("admin", True, j) for j in ids]
    assert [j["exit_code"] for j in jobs] == [0] * (n + 1)
    books_exact(b, jobs, bids + [10.0], n)


def test_the_day_ahead_dpgva_auction_reserves_every_node_and_runs_the_winner_inside(market, multinode, tmp_path):
    """DPGVA on the cluster (Mutz 2008, chapter 5: every bid takes the whole machine): two bids
    for the same 60 s slot; the higher wins at the other's value (its Clarke price), the loser
    pays nothing; the winner's reservation holds every node of the cluster, and Slurm runs its
    command inside that reservation on one of them. (Distinct nodes per bid are not sold: the
    docs' day-ahead section on a cluster says why.)"""
    from marketsched.live.dayahead import ESCROW, DayAhead, config_from_clock
    from marketsched.platform.ledger import MICRO
    from marketsched.platform.slurm import parse_scontrol

    b = market()
    cfg = config_from_clock(b._t, clear_in=1.0, lead=2.0, horizon=60.0, granularity=60.0, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    try:
        b.add_user(True, "u", 100)
        b.add_user(True, "v", 100)
        x = da.place_bid("u", 60.0, 60.0, 50.0, command="hostname")
        y = da.place_bid("v", 60.0, 60.0, 10.0)
        da.start(0.1)
        assert wait_for(lambda: da.showres("admin", True)["rounds"][0]["cleared_t"] is not None, HANG), da.last_error
        x, y = da.bid(x["id"]), da.bid(y["id"])
        assert (x["state"], y["state"]) == ("won", "lost")
        assert x["price"] == pytest.approx(10.0, abs=1e-6) and y["price"] == 0
        assert b.balance["u"] == 90 * MICRO and b.balance["v"] == 100 * MICRO
        assert b.store.balances()[ESCROW] == 0
        r = parse_scontrol(run(["scontrol", "-o", "show", "reservation", x["reservation"]]))
        assert sorted(run(["scontrol", "show", "hostnames", r["Nodes"]]).split()) == multinode
        sid = int(x["job_ref"].split(":")[1])
        assert parse_scontrol(run(["scontrol", "-o", "show", "job", str(sid)]))["Reservation"] == x["reservation"]
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "completed", HANG), (da.bid(x["id"]), da.last_error)
        node = (da.root / f"job-{x['id']}" / "stdout").read_text().strip()
        assert node in multinode
        assert node == parse_scontrol(run(["scontrol", "-o", "show", "job", str(sid)]))["NodeList"]
        books = b.store.check_books()
        assert books["users"] + books["revenue"] == books["deposits"]
    finally:
        da.stop(cancel=True)
