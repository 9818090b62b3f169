"""The market's capacity follows the CPUs Slurm can run on (a node down, a node back), fast and
without a cluster: the priority mechanisms' rule when the engine's capacity falls below the
processors in use, checked against a plain reference on random instances with ties; and the
broker on the Slurm executor with a fake Slurm (the pattern of tests/test_slurm_gate.py): the
lowest bids stop, are not charged while stopped, the ledger is the replay's, and the capacity
comes back with the node."""

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

    def __call__(self, args, timeout=30.0, input=None):
        out = super().__call__(args, timeout, input)
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
