"""The market's capacity follows the CPUs Slurm can run on (a node down, a node back), fast and
without a cluster: the priority mechanisms' rule when the engine's capacity falls below the
processors in use, checked against a plain reference on random instances with ties; and the
broker on the Slurm executor with a fake Slurm (the pattern of tests/test_slurm_gate.py): the
lowest bids stop, are not charged while stopped, the ledger is the replay's, and the capacity
comes back with the node."""

import time

import numpy as np
import pytest

import marketsched.platform.slurm as slurm
from marketsched.live.broker import Broker, MarketConfig, capacity_changes
from marketsched.live.replay import simulate_recorded
from marketsched.mechanisms.online.priority import PriorityScheduler
from marketsched.platform.clock import FakeClock
from marketsched.platform.engine import LiveEngine
from test_slurm_gate import FakeSlurm


def ranked(key, rows):
    """Rows best first: the mechanisms' order (higher key first, among equal keys the earlier row)."""
    return sorted(rows, key=lambda j: (-key[j], j))


@pytest.mark.parametrize("rule", ["hb", "nphb", "wsept"])
@pytest.mark.parametrize("seed", range(30))
def test_a_capacity_drop_stops_exactly_the_lowest_running_jobs(rule, seed):
    rng = np.random.default_rng(seed)
    slots = int(rng.integers(2, 7))
    n = int(rng.integers(1, 13))
    bids = rng.integers(1, 4, n).astype(float)  # few values: many ties
    cost = rng.integers(1, 3, n).astype(float) if rule == "wsept" else np.ones(n)
    key = bids / cost
    clock = FakeClock(0.0)
    eng = LiveEngine(PriorityScheduler([], [], [], preemptive=(rule == "hb"), name=rule), slots, clock)
    eng.batch(arrivals=[(bids[j], key[j], cost[j], 1) for j in range(n)])
    before = [j for j in range(n) if eng.running[j]]
    new = int(rng.integers(0, slots + 1))
    clock.set(1.0)
    eng.batch(capacity=new)
    after = [j for j in range(n) if eng.running[j]]
    # reference: the running jobs keep running, best first, as many as fit; nothing else starts
    assert after == sorted(ranked(key, before)[:new])
    assert eng.used <= new and eng.capacity_changes == ([(1.0, new)] if new != slots else [])
    for j in set(before) - set(after):
        assert eng.preemptions[j] == 1
    # the capacity comes back: the mechanism fills it as at any event (HB: the best jobs of all)
    clock.set(2.0)
    eng.batch(capacity=slots)
    back = [j for j in range(n) if eng.running[j]]
    assert len(back) == min(n, slots)
    if rule == "hb":
        assert back == sorted(ranked(key, range(n))[:slots])
    else:  # non-preemptive: those running keep their processors, the best queued take the rest
        queued = [j for j in range(n) if j not in after]
        assert back == sorted(after + ranked(key, queued)[:slots - len(after)])


def test_capacity_out_of_range_is_refused_naming_the_bounds():
    eng = LiveEngine(PriorityScheduler([], [], [], preemptive=True, name="hb"), 4, FakeClock(0.0))
    for bad in (-1, 5, 2.5):
        with pytest.raises(ValueError, match="capacity must be a whole number from 0 to 4"):
            eng.batch(capacity=bad)
    eng.batch(capacity=0)
    assert eng.submit_job(1.0, 1.0, 1.0) == 0 and eng.used == 0  # accepted, waits for a processor


class NodesSlurm(FakeSlurm):
    """A fake Slurm that runs whatever it was given (every submitted job listed RUNNING until
    the test ends it) and whose ``other`` CPUs are down."""

    def __init__(self, cpus):
        super().__init__(cpus=cpus)
        self.ended: set[int] = set()

    def __call__(self, args, timeout=30.0, input=None, env=None):
        out = super().__call__(args, timeout, input, env)
        if args[:3] == ["squeue", "-h", "-a"]:
            return "".join(f"{j}|COMPLETED|None\n" if j in self.ended else f"{j}|RUNNING|None\n"
                           for j in range(101, self.next_id + 1))
        if args[:4] == ["scontrol", "-o", "show", "job"] and int(args[4]) in self.ended:
            return f"JobId={args[4]} JobState=COMPLETED ExitCode=0:0\n"
        return out


@pytest.fixture
def market(monkeypatch, tmp_path):
    fake = NodesSlurm(cpus=4)
    monkeypatch.setattr(slurm, "run", fake)
    (tmp_path / "m" / "jobs").mkdir(parents=True)
    ex = slurm.SlurmExecutor(tmp_path / "m" / "jobs", slots=4, poll=0.0)
    clock = FakeClock(0.0)
    b = Broker(tmp_path / "m", MarketConfig(executor="slurm", slots=4, single_user=True), clock=clock, executor=ex)
    b.ensure_admin()
    b.add_user(True, "a", 10_000)
    yield b, fake, clock
    b.stop(kill_jobs=True)


def states(b):
    return {j["id"]: j["state"] for j in b.jobs("admin", True)}


def test_node_down_stops_the_lowest_bids_uncharged_and_node_up_starts_them_again(market):
    b, fake, clock = market
    bids = [5.0, 3.0, 8.0, 3.0, 6.0, 2.0]
    ids = [b.submit("a", False, x, "true")["id"] for x in bids]
    top = lambda k: sorted(sorted(range(len(ids)), key=lambda i: (-bids[i], i))[:k])  # noqa: E731
    assert [i for i, j in enumerate(ids) if states(b)[j] == "running"] == top(4)
    clock.set(10.0)
    b.step()
    fake.other = 2  # a node of 2 CPUs goes down: Slurm can run on 2
    b.step()
    st = states(b)
    assert [i for i, j in enumerate(ids) if st[j] == "running"] == top(2)
    stopped = [ids[i] for i in top(4) if i not in top(2)]  # bids 5 and 3 (the earlier 3 ran)
    assert {st[j] for j in stopped} == {"preempted"}
    assert all(j in b.executor._suspend or b.executor.procs[j].suspended_at is not None for j in stopped)
    assert capacity_changes(b.store) == [[10.0, 2]]
    charged = {j: b.job("admin", True, j)["charged"] for j in ids}
    clock.set(20.0)
    b.step()  # ten seconds with the node down: the stopped jobs pay nothing
    for j in ids:
        assert (b.job("admin", True, j)["charged"] == charged[j]) == (j not in {ids[i] for i in top(2)})
    fake.other = 0  # the node is back
    clock.set(25.0)
    b.step()
    st = states(b)
    assert [i for i, j in enumerate(ids) if st[j] == "running"] == top(4)
    assert capacity_changes(b.store) == [[10.0, 2], [25.0, 4]]
    # every job runs to its end, in two waves; the ledger is the replay's on the recorded sequence
    for t, wave in ((30.0, top(4)), (40.0, [i for i in range(len(ids)) if i not in top(4)])):
        clock.set(t)
        fake.ended |= {b.executor.recorded(ids[i])[0] for i in wave}
        b.step()
    jobs = [b.job("admin", True, j) for j in ids]
    assert {j["state"] for j in jobs} == {"completed"}
    rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], bids, 4,
                            capacity_changes=capacity_changes(b.store))
    np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"])


def test_a_market_started_while_a_node_is_down_runs_on_the_nodes_that_are_up(monkeypatch, tmp_path):
    fake = NodesSlurm(cpus=4)
    fake.other = 2
    monkeypatch.setattr(slurm, "run", fake)
    (tmp_path / "m" / "jobs").mkdir(parents=True)
    ex = slurm.SlurmExecutor(tmp_path / "m" / "jobs", slots=4, poll=0.0)  # 4 slots: the CPUs, down ones included
    assert (ex.cpus, ex.usable, ex.capacity) == (4, 2, 2)
    b = Broker(tmp_path / "m", MarketConfig(executor="slurm", slots=4, single_user=True), clock=FakeClock(0.0),
               executor=ex)
    try:
        b.ensure_admin()
        b.add_user(True, "a", 10_000)
        ids = [b.submit("a", False, x, "true")["id"] for x in (1.0, 3.0, 2.0)]
        assert [states(b)[j] for j in ids] == ["preempted", "running", "running"]  # HB on 2 processors
        assert capacity_changes(b.store) == [[0.0, 2]]
    finally:
        b.stop(kill_jobs=True)


def test_a_node_that_misses_pings_offers_no_free_cpu_and_each_node_counts_once(monkeypatch, tmp_path):
    """``sinfo -N`` lists a node once per partition: the executor reads one partition (Slurm's
    default, main, here) node by node; a node the controller cannot reach (``*``) counts only
    the CPUs its jobs hold, one declared down nothing."""
    calls = []

    def fake(args, timeout=30.0, input=None):
        calls.append(args)
        if args[:2] == ["sinfo", "-h"] and "%P" in args:
            return "main*\npa\npb\n"
        assert args[:5] == ["sinfo", "-h", "-N", "-o", "%N %C %t"] and args[5:] == ["-p", "main"], args
        return "node1 0/2/0/2 idle\nnode2 1/1/0/2 mix*\nnode3 0/0/2/2 down*\nnode4 2/0/0/2 alloc\n"

    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path / "jobs")
    assert (ex.usable, ex.cpus) == (2 + 1 + 0 + 2, 8)
    assert set(ex.unreachable) == {"node2", "node3"}


class FailingSlurm(NodesSlurm):
    """Two nodes of 2 CPUs (node1, node2); ``nodes``: node -> (allocated CPUs, sinfo state);
    jobs in ``node_fail`` ended NODE_FAIL at ``end_time`` (Unix seconds)."""

    def __init__(self):
        super().__init__(cpus=4)
        self.nodes = {"node1": (0, "idle"), "node2": (0, "idle")}
        self.node_fail: set[int] = set()
        self.end_time = 0.0

    def __call__(self, args, timeout=30.0, input=None, env=None):
        if args[:2] == ["sinfo", "-h"] and "%N %C %t" in args:
            return "".join(f"{n} {a}/{2 - a if not s.startswith('down') else 0}/{2 if s.startswith('down') else 0}/2 {s}\n"
                           for n, (a, s) in self.nodes.items())
        if args[:3] == ["scontrol", "show", "config"]:
            return "SlurmdTimeout           = 6 sec\nTCPTimeout              = 2 sec\n"
        out = super().__call__(args, timeout, input, env)
        if args[:3] == ["squeue", "-h", "-a"]:
            return "".join(f"{j}|{'NODE_FAIL' if int(j) in self.node_fail else st}|None\n"
                           for j, st, _ in (line.split("|") for line in out.splitlines()))
        if args[:4] == ["scontrol", "-o", "show", "job"] and int(args[4]) in self.node_fail:
            end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.end_time))
            return f"JobId={args[4]} JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0 EndTime={end} NodeList=node2\n"
        return out


def test_a_job_on_a_node_that_dies_is_charged_up_to_the_failure_not_its_detection(monkeypatch, tmp_path):
    """Three jobs run on two nodes; node2 dies: a poll sees it unreachable (``mix*``) at wall
    time 1004, Slurm declares it down at 1016 (SlurmdTimeout 6 s: silent since 1010 at the
    latest) and ends its job NODE_FAIL. The job is charged and metered up to 1004, the earlier
    of the two; what was posted since is refunded; the capacity keeps the CPU the job held until
    its end (no other job stops for it); the ledger is the replay's on the recorded run."""
    wall = [1000.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    fake = FailingSlurm()
    monkeypatch.setattr(slurm, "run", fake)
    (tmp_path / "m" / "jobs").mkdir(parents=True)
    ex = slurm.SlurmExecutor(tmp_path / "m" / "jobs", slots=4, poll=0.0)
    clock = FakeClock(0.0)
    b = Broker(tmp_path / "m", MarketConfig(executor="slurm", slots=4, single_user=True, charge_interval=1.0),
               clock=clock, executor=ex)
    try:
        b.ensure_admin()
        b.add_user(True, "a", 10_000)
        bids = [5.0, 3.0, 2.0]
        ids = [b.submit("a", False, x, "true")["id"] for x in bids]
        lost = ids[1]
        fake.nodes = {"node1": (2, "alloc"), "node2": (1, "mix")}
        for t in (4.0, 10.0):
            clock.set(t)
            wall[0] = 1000.0 + t
            if t == 4.0:
                fake.nodes["node2"] = (1, "mix*")  # misses pings: no free CPU, its job's CPU kept
            b.step()
        assert ex.unreachable == {"node2": 1004.0}
        assert states(b) == {j: "running" for j in ids} and b.engine.capacity == 3
        for t in (16.0,):  # Slurm declares node2 down and ends its job
            clock.set(t)
            wall[0] = 1000.0 + t
            fake.nodes["node2"] = (0, "down*")
            fake.node_fail.add(b.executor.recorded(lost)[0])
            fake.end_time = 1016.0
            b.step()
        job = b.job("admin", True, lost)
        assert job["state"] == "failed" and "NODE_FAIL" in job["note"] and job["end_t"] == 16.0
        assert job["run_seconds"] == 4.0 and job["charged"] == pytest.approx(4.0 * 1.0, abs=1e-6)  # price 1: no queue
        assert [e["t"] for e in job["events"] if e["kind"] == "node-failure"] == [4.0]
        refunds = [e for e in b.store.entries() if e["kind"] == "refund"]
        assert [(e["job_id"], e["amount"]) for e in refunds] == [(lost, 6_000_000)]  # posted up to 10, charged to 4
        assert b.engine.capacity == 2 and capacity_changes(b.store) == [[4.0, 3], [16.0, 2]]
        clock.set(30.0)
        fake.ended |= {b.executor.recorded(j)[0] for j in (ids[0], ids[2])}
        b.step()
        jobs = [b.job("admin", True, j) for j in ids]
        rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], bids, 4,
                                capacity_changes=capacity_changes(b.store))
        np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
        b.store.check_books()
        assert b.store.charged_by_job()[lost] == 4_000_000
    finally:
        b.stop(kill_jobs=True)


def test_the_failure_time_is_the_earlier_of_the_first_unreachable_poll_and_the_declared_end_less_the_timeout(
        monkeypatch, tmp_path):
    fake = FailingSlurm()
    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path / "jobs", slots=4)
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(2000.0))
    for seen, want in ((1997.0, 1994.0), (1990.0, 1990.0), (None, 1994.0)):
        ex.unreachable = {} if seen is None else {"node2": seen}
        ex._node_failed(7, {"NodeList": "node2", "EndTime": end})
        assert ex.failure_time(7) == want and ex.failure_time(7) is None  # read once
    ex._node_failed(7, {"NodeList": "node2", "EndTime": "Unknown"})
    assert ex.failure_time(7) is None  # nothing Slurm reported: the market's own end time stands


def test_a_node_declared_down_between_the_reads_of_a_poll_leaves_in_the_batch_of_its_jobs_ends(
        monkeypatch, tmp_path):
    """The poll reads the nodes (node2 unreachable, ``mix*``: its job's CPU still counted), then
    the jobs; Slurm declares node2 down in between, so the jobs' read shows its job ended
    NODE_FAIL. The executor reads the nodes again: the capacity drops in the batch of that end,
    not a poll later (seen on the 4-node cluster: meanwhile the market counted a CPU that was gone)."""
    wall = [1000.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])

    class Racing(FailingSlurm):
        def __call__(self, args, timeout=30.0, input=None, env=None):
            if args[:3] == ["squeue", "-h", "-a"] and self.declare is not None:
                self.nodes["node2"] = (0, "down*")  # declared down once the nodes were read
                self.node_fail.add(self.declare)
                self.declare = None
            return super().__call__(args, timeout, input, env)

    fake = Racing()
    fake.declare = None
    monkeypatch.setattr(slurm, "run", fake)
    (tmp_path / "m" / "jobs").mkdir(parents=True)
    ex = slurm.SlurmExecutor(tmp_path / "m" / "jobs", slots=4, poll=0.0)
    clock = FakeClock(0.0)
    b = Broker(tmp_path / "m", MarketConfig(executor="slurm", slots=4, single_user=True), clock=clock, executor=ex)
    try:
        b.ensure_admin()
        b.add_user(True, "a", 10_000)
        ids = [b.submit("a", False, x, "true")["id"] for x in (5.0, 3.0, 2.0)]
        fake.nodes = {"node1": (2, "alloc"), "node2": (1, "mix*")}
        clock.set(4.0)
        b.step()
        assert b.engine.capacity == 3 and states(b) == {j: "running" for j in ids}
        fake.end_time = 1016.0
        fake.declare = b.executor.recorded(ids[1])[0]
        clock.set(16.0)
        b.step()
        assert states(b)[ids[1]] == "failed"
        assert b.engine.capacity == 2 and capacity_changes(b.store) == [[4.0, 3], [16.0, 2]]
    finally:
        b.stop(kill_jobs=True)


@pytest.mark.parametrize("partition, expected", [(None, 3), ("pa", 5)])
def test_running_cpus_counts_the_markets_partition_only(monkeypatch, tmp_path, partition, expected):
    """The CPUs running jobs hold (the resume gate's count) are those of the market's partition:
    its own, else Slurm's default (``*`` in ``sinfo %P``), never every partition's."""
    held = {"main": [2, 1], "pa": [4, 1]}  # running jobs' CPUs per partition; main is the default

    class Partitions(FakeSlurm):
        def __call__(self, args, timeout=30.0, input=None, env=None):
            if args[:4] == ["squeue", "-h", "-t", "R"]:
                names = args[args.index("-p") + 1].split(",") if "-p" in args else list(held)
                return "".join(f"{c}\n" for name in names for c in held[name])
            return super().__call__(args, timeout, input, env)

    fake = Partitions()
    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path, partition=partition, slots=4)
    assert ex.running_cpus() == expected
