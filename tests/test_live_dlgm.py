"""DLGM and P-DLGM as a running market: the node choice and the compensations of a hand-worked
example equal the simulator's on the same arrivals (to the micro-unit), P-DLGM preempts, a job is
stopped at its reported run time, and hostile submissions are refused with the books exact."""

import math

import numpy as np
import pytest

from marketsched.live.dlgm import DLGMMarket
from marketsched.mechanisms.online.dlgm import run_dlgm
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, Store, user_account
from marketsched.platform.validation import MarketError
from marketsched.workloads.workload import Workload


class Recorder:
    """An executor that records what the market asks of it (the engine-level tests)."""

    def __init__(self):
        self.calls = []

    def launch(self, key, command, env=None):
        self.calls.append(("launch", key))

    def stop(self, key):
        self.calls.append(("stop", key))

    def cont(self, key):
        self.calls.append(("cont", key))

    def kill(self, key):
        self.calls.append(("kill", key))


def make(tmp_path, nodes, preemptive=False, executor=None, users=("alice", "bob", "carol"), deposit=100.0):
    clock = FakeClock(0.0)
    m = DLGMMarket(Store(tmp_path), nodes, preemptive, clock, executor if executor is not None else Recorder())
    for u in users:
        m.add_user(u, deposit)
    return m, clock


def until(m, clock, t):
    """The market's loop up to ``t``: each stop at its reported time, in time order."""
    while m.next_stop() <= t:
        clock.set(m.next_stop())
        m.tick()
    clock.set(t)


def play(m, clock, script):
    """Submit ``(t, owner, weight, runtime)`` in order, run to the end; returns the job ids."""
    ids = []
    for t, owner, w, d in script:
        until(m, clock, t)
        ids.append(m.submit(owner, w, d, "true")["id"])
    until(m, clock, 1e6)
    return ids


def simulated(script, nodes, preemptive, **kw):
    t, _, w, d = zip(*script)
    wl = Workload.from_columns(submit_time=list(t), runtime=list(d), procs=None, capacity=nodes)
    return run_dlgm(wl, list(w), preemptive, **kw)


def net_micros(m, script, deposit=100):
    """Each owner's net money flow (micro-units) from the ledger, minus their deposit."""
    return {u: m.balance(u) - deposit * MICRO for u in {s[1] for s in script}}


def expected_net(script, rec):
    out = {}
    for (_, owner, _, _), p in zip(script, rec.payment):
        out[owner] = out.get(owner, 0) - round(p * MICRO)
    return out


# Two nodes; (release, owner, weight per second, reported run time). By hand (DLGM):
# A at 0 takes idle node 0 (ends 8); B at 1 takes idle node 1 (ends 7); C (ratio 0.375) at 2:
# node 0 offers completion 2+4+6 = 12, node 1 2+4+5 = 11: node 1, queued, pays nothing. D (ratio
# 2) at 3: node 0 offers 3+2+5 = 10 and no payment (utility -40); node 1 3+2+4 = 9 and pays C's
# weight times its run time, 1.5 * 2 = 3 (utility -4*9 - 3 = -39): node 1, ahead of C. E (ratio 1)
# at 4: node 0 offers 4+1+4 = 9, no payment (-9); node 1 4+1+3+2 = 10 and 1.5 (-11.5): node 0.
# Node 1 runs B to 7, D to 9, C to 13; node 0 A to 8, E to 9. Money: bob (D) pays alice (C) 3.
HAND = [(0, "alice", 1.0, 8.0), (1, "carol", 1.0, 6.0), (2, "alice", 1.5, 4.0), (3, "bob", 4.0, 2.0),
        (4, "carol", 1.0, 1.0)]


def test_dlgm_hand_example_node_choice_and_compensations_equal_the_simulator(tmp_path):
    m, clock = make(tmp_path, 2)
    got = []
    for t, owner, w, d in HAND:
        until(m, clock, t)
        if owner == "bob":  # the quote before the submission: node 1 is the best response
            q = m.quote(w, d)
            assert [(r["node"], r["completion"], r["payment"], r["utility"]) for r in q] == \
                [(1, 9.0, 3.0, -39.0), (0, 10.0, 0.0, -40.0)]
        got.append(m.submit(owner, w, d, "true"))
    until(m, clock, 100)
    assert [g["node"] for g in got] == [0, 1, 1, 1, 0]
    assert [g["transfers"] for g in got] == [[], [], [], [(got[2]["id"], 3 * MICRO)], []]
    e = m.engine
    assert e.first_start == [0, 1, 9, 7, 8] and e.end_time == [8, 7, 13, 9, 9]
    rec, pol = simulated(HAND, 2, False)
    assert pol.node.tolist() == [g["node"] for g in got]
    assert rec.first_start.tolist() == e.first_start and rec.end_time.tolist() == e.end_time
    assert rec.payment.tolist() == e.payment  # the policy's own ledger, bit for bit
    assert net_micros(m, HAND) == expected_net(HAND, rec) == \
        {"alice": 3 * MICRO, "bob": -3 * MICRO, "carol": 0}
    assert set(m.state.values()) == {"stopped"}
    m.store.check_books()


@pytest.mark.parametrize("preemptive", [False, True])
def test_random_arrivals_replay_equal_to_the_simulator(tmp_path, preemptive):
    """Random arrivals with ties (whole and half weights and run times, shared release times,
    arrivals at completion times): the live market's nodes, starts, ends, preemptions and money
    equal the simulator's. Each live submission and stop is its own batch; a job that a later
    batch of the same clock time displaces did not run, as in the simulator's single batch."""
    rng = np.random.default_rng(7 + preemptive)
    t = np.sort(rng.integers(0, 12, 25)).astype(float)
    script = [(float(t[i]), ["alice", "bob", "carol"][i % 3], float(rng.integers(1, 8)) / 2,
               float(rng.integers(1, 9)) / 2) for i in range(25)]
    m, clock = make(tmp_path, 3, preemptive, deposit=1000.0)
    play(m, clock, script)
    rec, pol = simulated(script, 3, preemptive)
    e = m.engine
    assert pol.node.tolist() == m.mechanism.node.tolist()
    assert rec.first_start.tolist() == e.first_start and rec.end_time.tolist() == e.end_time
    assert rec.preemptions.tolist() == e.preemptions
    assert rec.payment.tolist() == e.payment
    assert any(p != 0 for p in e.payment)
    if preemptive:
        assert sum(e.preemptions) > 0
    assert net_micros(m, script, 1000) == expected_net(script, rec)
    m.store.check_books()


def test_pdlgm_preempts_pays_the_preempted_and_resumes_it(tmp_path):
    """One node: A (weight 1, 10 s) runs from 0; B (weight 5, 2 s) at 2 has ratio 2.5 > A's
    1/8 on its remaining 8 s: B preempts A and pays it 1 * 2; A resumes at 4 and ends at 12."""
    rec = Recorder()
    m, clock = make(tmp_path, 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")
    until(m, clock, 2)
    b = m.submit("bob", 5.0, 2.0, "true")
    assert b["transfers"] == [(a["id"], 2 * MICRO)]
    assert m.state[a["id"]] == "preempted" and m.state[b["id"]] == "running"
    assert rec.calls == [("launch", a["id"]), ("stop", a["id"]), ("launch", b["id"])]
    until(m, clock, 100)
    assert rec.calls[3:] == [("kill", b["id"]), ("cont", a["id"]), ("kill", a["id"])]
    assert m.engine.end_time == [12.0, 4.0] and m.engine.preemptions == [1, 0]
    assert m.balance("alice") - m.balance("bob") == 4 * MICRO
    # the non-preemptive market queues B behind A instead
    m2, clock2 = make(tmp_path / "np", 1, preemptive=False)
    m2.submit("alice", 1.0, 10.0, "true")
    clock2.set(2)
    assert m2.submit("bob", 5.0, 2.0, "true")["transfers"] == []
    assert m2.engine.preemptions == [0, 0]


def test_a_job_is_stopped_at_its_reported_run_time(tmp_path):
    """The overrun rule: a job still running at its reported time is killed then and its node
    goes to the next job at exactly that time; one that exits early completes early."""
    rec = Recorder()
    m, clock = make(tmp_path, 1, executor=rec)
    a = m.submit("alice", 1.0, 3.0, "sleep 100")["id"]
    b = m.submit("bob", 1.0, 2.0, "sleep 100")["id"]
    c = m.submit("carol", 1.0, 5.0, "true")["id"]
    clock.set(2.999)
    assert m.tick() == [] and m.state[a] == "running"
    assert m.next_stop() == 3.0
    clock.set(3.0)
    assert m.tick() == [a]
    assert m.state[a] == "stopped" and m.state[b] == "running" and m.engine.first_start[1] == 3.0
    assert ("kill", a) in rec.calls
    clock.set(4.0)  # b's process ends before its reported 2 s: it completes, c starts at once
    m.exited(b)
    assert m.state[b] == "completed" and m.state[c] == "running" and m.engine.first_start[2] == 4.0
    assert ("kill", b) not in rec.calls
    assert [e["kind"] for e in m.store.events(a)][-1] == "stopped"
    m.exited(a)  # its process ended as the market stopped it: nothing changes
    assert m.state[a] == "stopped" and m.engine.state[0] == 1 and m.engine.end_time[0] == 3.0


@pytest.mark.parametrize("runtime", [-1.0, 0.0, 1e-4, 2e9, math.inf, math.nan, "5", True, None])
def test_bad_runtime_is_refused_and_changes_nothing(tmp_path, runtime):
    m, _ = make(tmp_path, 2)
    before = m.store.balances()
    with pytest.raises(MarketError, match="runtime") as exc:
        m.submit("alice", 1.0, runtime, "true")
    assert exc.value.status == 400
    with pytest.raises(MarketError, match="runtime"):
        m.quote(1.0, runtime)
    assert m.engine.n_jobs == 0 and m.store.jobs() == [] and m.store.balances() == before


@pytest.mark.parametrize("node", [2, -1, 10**30, "1; drop", 1.0])
def test_a_node_that_does_not_exist_is_refused(tmp_path, node):
    m, _ = make(tmp_path, 2)
    with pytest.raises(MarketError, match="node") as exc:
        m.submit("alice", 1.0, 1.0, "true", node=node)
    assert exc.value.status == 400
    assert m.engine.n_jobs == 0 and m.store.jobs() == []


def test_named_node_and_paying_with_money_you_do_not_have(tmp_path):
    """A job may name a node other than its best; compensations it cannot pay refuse it (402)
    with nothing recorded; the ledger is exact after the refusal and after a paid overtake."""
    m, clock = make(tmp_path, 2, users=("alice", "bob"), deposit=0.0)
    m.add_user("rich", 10.0)
    m.submit("alice", 1.0, 10.0, "true")  # node 0
    assert m.submit("alice", 1.0, 10.0, "true", node=0)["node"] == 0  # named: queued behind, node 1 idle
    clock.set(1)
    before = m.store.balances()
    with pytest.raises(MarketError, match="compensations on node 0 come to 10.000000 but bob holds 0") as exc:
        m.submit("bob", 5.0, 10.0, "true", node=0)  # overtakes the queued job: 1 * 10 = 10
    assert exc.value.status == 402
    assert m.engine.n_jobs == 2 and len(m.store.jobs()) == 2 and m.store.balances() == before
    got = m.submit("rich", 5.0, 10.0, "true", node=0)
    assert got["transfers"] == [(2, 10 * MICRO)]
    assert m.balance("rich") == 0 and m.balance("alice") == 10 * MICRO
    assert m.store.balance(user_account("bob")) == 0
    m.store.check_books()
    with pytest.raises(MarketError, match="unknown user") as exc:
        m.submit("mallory", 1.0, 1.0, "true")
    assert exc.value.status == 404
    for command, status in (("", 400), ("a\x00b", 400), (["ls"], 400), ("x" * 65537, 413)):
        with pytest.raises(MarketError, match="command") as exc:
            m.submit("rich", 1.0, 1.0, command)
        assert exc.value.status == status
    for weight in (0, -1, 2e9, math.nan, "1"):
        with pytest.raises(MarketError, match="bid"):
            m.submit("rich", weight, 1.0, "true")
    assert m.engine.n_jobs == 3 and len(m.store.jobs()) == 3
    m.store.check_books()


def test_real_processes_preempted_resumed_and_stopped_at_the_reported_time(tmp_path):
    """The local executor carries the P-DLGM market's decisions out on real processes: the
    preempted job's processes are suspended, resumed when the preemptor's process exits, and
    killed at the job's reported run time (market time is the injected clock)."""
    from live_helpers import proc_state, wait_for
    from marketsched.platform.executor import LocalExecutor

    ex = LocalExecutor(tmp_path / "jobs")
    try:
        m, clock = make(tmp_path, 1, preemptive=True, executor=ex)
        a = m.submit("alice", 1.0, 10.0, "sleep 300")["id"]
        pid = ex.procs[a].pid
        clock.set(2)
        go = tmp_path / "go"
        b = m.submit("bob", 5.0, 2.0, f"while [ ! -e {go} ]; do sleep 0.05; done")["id"]
        assert m.state[a] == "preempted" and b in ex.procs
        assert wait_for(lambda: ex.frozen(a) if ex.contained else proc_state(pid) == "T")
        go.touch()
        assert wait_for(lambda: any(k == b for k, _ in ex.exits()))
        clock.set(3)
        m.exited(b)
        assert m.state[a] == "running" and m.state[b] == "completed"
        assert wait_for(lambda: not ex.frozen(a) if ex.contained else proc_state(pid) != "T")
        clock.set(m.next_stop())
        assert m.next_stop() == 11.0  # 3 + the 8 s A had left
        assert m.tick() == [a]
        assert m.state[a] == "stopped" and a not in ex.procs
        assert wait_for(lambda: proc_state(pid) in (None, "Z", "X"))
        m.store.check_books()
    finally:
        for key in list(ex.procs):
            ex.kill(key)


@pytest.mark.parametrize("preemptive", [False, True])
def test_the_simulator_tests_hand_example_replays_equal(tmp_path, preemptive):
    """The hand-worked example of the simulator's tests (two nodes, arrivals sharing release
    times; tests/test_dlgm.py) run live gives the simulator's nodes, times and money."""
    script = [(0.0, "alice", 1.0, 4.0), (0.0, "bob", 3.0, 2.0), (1.0, "carol", 3.0, 3.0), (1.0, "alice", 2.0, 1.0),
              (2.0, "bob", 1.0, 2.0)]
    m, clock = make(tmp_path, 2, preemptive)
    play(m, clock, script)
    rec, pol = simulated(script, 2, preemptive)
    e = m.engine
    assert pol.node.tolist() == m.mechanism.node.tolist()
    assert rec.first_start.tolist() == e.first_start and rec.end_time.tolist() == e.end_time
    assert rec.preemptions.tolist() == e.preemptions and rec.payment.tolist() == e.payment
    assert net_micros(m, script) == expected_net(script, rec)
    m.store.check_books()


@pytest.mark.parametrize("preemptive", [False, True])
def test_quotes_equal_the_offers_the_simulator_records(tmp_path, preemptive):
    """The quote a job sees just before its submission (every node's tentative completion time
    and payment) equals the offers the simulator records for that job (``record_offers``), on
    random arrivals with ties and distinct release times."""
    rng = np.random.default_rng(11 + preemptive)
    t = np.sort(rng.choice(np.arange(0, 20, 0.5), 30, replace=False))
    script = [(float(t[i]), ["alice", "bob"][i % 2], float(rng.integers(1, 6)) / 2, float(rng.integers(1, 9)) / 2)
              for i in range(30)]
    m, clock = make(tmp_path, 3, preemptive, users=("alice", "bob"), deposit=1000.0)
    quotes = []
    for tt, owner, w, d in script:
        until(m, clock, tt)
        q = sorted(m.quote(w, d), key=lambda r: r["node"])
        quotes.append(([r["completion"] for r in q], [r["payment"] for r in q]))
        m.submit(owner, w, d, "true")
    _, pol = simulated(script, 3, preemptive, record_offers=True)
    for j, (e, p) in enumerate(quotes):
        assert e == pol.offers_completion[j].tolist() and p == pol.offers_payment[j].tolist(), j
    assert any(any(p) for _, p in quotes)



def test_a_capacity_change_is_refused_dlgm_nodes_are_fixed(tmp_path):
    """The live engine's capacity follows a cluster's nodes for the priority markets; DLGM's nodes
    each keep their own queue, so its engine refuses a change rather than mis-schedule."""
    from marketsched.live.dlgm import DLGMEngine
    from marketsched.mechanisms.online.dlgm import DLGM

    eng = DLGMEngine(DLGM([], [], preemptive=False), 2, lambda: 0.0)
    with pytest.raises(ValueError, match="fixed at 2"):
        eng.batch(capacity=1)
    assert eng.batch(capacity=2) is not None


@pytest.mark.parametrize("preemptive", [False, True])
def test_cancellations_replay_equal_to_the_simulator(tmp_path, preemptive):
    """Random arrivals with ties; after some arrivals, the oldest waiting job of a random owner
    is cancelled (queued or, under P-DLGM, preempted). The live market's nodes, starts, ends,
    preemptions and money equal the simulator's given the cancellations (``cancel``), and no
    money moved at a cancellation (the cancellation rule: no refund either way)."""
    rng = np.random.default_rng(5 + preemptive)
    t = np.sort(rng.integers(0, 12, 25)).astype(float)
    script = [(float(t[i]), ["alice", "bob", "carol"][i % 3], float(rng.integers(1, 8)) / 2,
               float(rng.integers(1, 9)) / 2) for i in range(25)]
    m, clock = make(tmp_path, 2, preemptive, deposit=1000.0)
    cancel, cancelled_from = {}, set()
    for i, (tt, owner, w, d) in enumerate(script):
        until(m, clock, tt)
        m.submit(owner, w, d, "true")
        waiting = [j for j, s in m.state.items() if s in ("queued", "preempted")]
        if waiting and rng.random() < 0.4:
            j = waiting[0]
            before = m.store.balances()
            cancelled_from.add(m.cancel(m.owner[m.job_row[j]], j))
            assert m.store.balances() == before and m.state[j] == "cancelled"
            cancel[m.job_row[j]] = (tt, i + 1)
    until(m, clock, 1e6)
    assert len(cancel) >= 3 and "queued" in cancelled_from
    if preemptive:
        assert "preempted" in cancelled_from
    rec, pol = simulated(script, 2, preemptive, cancel=cancel)
    e = m.engine
    assert pol.cancel_skipped == []
    assert pol.node.tolist() == m.mechanism.node.tolist()
    np.testing.assert_array_equal(rec.first_start, e.first_start)  # NaN: cancelled before it started
    assert rec.end_time.tolist() == e.end_time
    assert rec.preemptions.tolist() == e.preemptions and rec.payment.tolist() == e.payment
    assert rec.state.tolist() == e.state
    assert net_micros(m, script, 1000) == expected_net(script, rec)
    m.store.check_books()


def test_cancel_attacks_and_a_preempted_jobs_process_is_killed(tmp_path):
    """Only one's own waiting job can be cancelled, once: another user's (404, as if it did not
    exist), a running one (409), the same job twice (409), a job that ended (409), ids that are
    not jobs (400/404); each refusal changes nothing. A cancelled preempted job's suspended
    process is killed; a cancelled queued job never had one. The books stay exact."""
    rec = Recorder()
    m, clock = make(tmp_path, 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]  # runs
    clock.set(1)
    b = m.submit("bob", 1.0, 20.0, "true")["id"]  # queued behind a (ratio 1/20 < 1/9)
    clock.set(2)
    c = m.submit("carol", 8.0, 2.0, "true")["id"]  # preempts a, pays alice 2 and bob 2
    assert (m.state[a], m.state[b], m.state[c]) == ("preempted", "queued", "running")
    books = m.store.balances()
    events = len(m.store.events(a)) + len(m.store.events(b))

    def refused(user, job, status, match):
        with pytest.raises(MarketError, match=match) as exc:
            m.cancel(user, job)
        assert exc.value.status == status
        assert m.store.balances() == books

    refused("bob", a, 404, f"no DLGM job {a} of yours")  # another user's
    refused("alice", c, 404, "of yours")
    refused("carol", c, 409, "is running on node 0")  # one's own, running
    for bad, status in ((0, 400), (-1, 400), ("1; drop", 400), (True, 400), (1.0, 400), (99, 404)):
        refused("alice", bad, status, "job")
    assert len(m.store.events(a)) + len(m.store.events(b)) == events
    calls = len(rec.calls)
    assert m.cancel("alice", a) == "preempted"
    assert rec.calls[calls:] == [("kill", a)]
    refused("alice", a, 409, "already ended \\(cancelled\\)")  # twice
    assert m.cancel("admin", b, admin=True) == "queued"  # the administrator may; no process to kill
    assert rec.calls[calls + 1:] == []
    until(m, clock, 100)
    assert m.state[c] == "stopped" and m.engine.end_time == [2.0, 2.0, 4.0]
    refused("carol", c, 409, "already ended \\(stopped\\)")  # after it ended
    assert [e["kind"] for e in m.store.events(a)][-1] == "cancelled"
    assert m.balance("alice") == m.balance("bob") == 102 * MICRO and m.balance("carol") == 96 * MICRO
    m.store.check_books()


def test_a_start_taken_back_at_its_own_instant_suspends_the_process_and_continues_it(tmp_path):
    """P-DLGM on one node, both arrivals at market time 0: A starts, B (a higher ratio) displaces
    it at the same instant, before any progress (the engine's ``unstart``: A is queued again, not
    preempted). A's process is suspended, not killed, and continued when A's turn comes: its
    command runs once (before, the market killed it and launched it again, which the executor
    refuses: a job never runs twice). Cancelling such a job kills its process."""
    from live_helpers import proc_state, wait_for
    from marketsched.platform.executor import LocalExecutor

    rec = Recorder()
    m, clock = make(tmp_path / "r", 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]
    b = m.submit("bob", 5.0, 2.0, "true")["id"]
    assert m.state[a] == "queued" and m.held == {a}
    clock.set(2.0)
    m.tick()
    assert rec.calls == [("launch", a), ("stop", a), ("launch", b), ("kill", b), ("cont", a)]
    assert m.state[a] == "running" and m.held == set()
    rec = Recorder()  # a held job cancelled: its suspended process is killed
    m, clock = make(tmp_path / "c", 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]
    m.submit("bob", 5.0, 2.0, "true")
    m.cancel("alice", a)
    assert ("kill", a) in rec.calls and m.held == set()

    ex = LocalExecutor(tmp_path / "jobs")
    runs = tmp_path / "runs"
    try:
        m, clock = make(tmp_path / "x", 1, preemptive=True, executor=ex)
        a = m.submit("alice", 1.0, 10.0, f"echo a >> {runs}; sleep 300")["id"]
        b = m.submit("bob", 5.0, 2.0, "sleep 300")["id"]
        c = m.submit("carol", 0.5, 10.0, "sleep 300")["id"]  # waits behind A
        assert m.state[a] == "queued" and a in ex.procs
        assert wait_for(lambda: ex.frozen(a) if ex.contained else proc_state(ex.procs[a].pid) == "T")
        clock.set(2.0)
        assert m.tick() == [b]  # B's reported time: A's turn, its process continued
        assert m.state[a] == "running"
        assert wait_for(lambda: not ex.frozen(a) if ex.contained else proc_state(ex.procs[a].pid) != "T")
        assert wait_for(lambda: runs.exists() and runs.read_text() == "a\n")
        assert runs.read_text() == "a\n" and c not in ex.procs
        m.store.check_books()
    finally:
        for key in list(ex.procs):
            ex.kill(key)


def test_a_held_or_preempted_job_whose_process_ended_completes_at_its_turn_without_being_continued(tmp_path):
    """P-DLGM on one node, all at market time 0: A starts, B (a higher ratio) takes the start back
    at the same instant (A is held, its process suspended) and pays alice 1 * 2, C waits behind A.
    A's process had already ended (a command such as ``true`` can end before the suspend takes
    effect), and the market hears of the exit while A waits. A keeps its place and its money, and
    at its turn (B's reported time, 2) it starts and completes at that instant: its process is not
    continued, the node is not kept for A's reported 10 s, C starts at 2. Likewise a preempted
    job whose process ended while suspended completes when it resumes. (Before, the market
    continued a process that was gone and kept the node until A's reported run time.) A's
    node, first start, preemptions and payments are the simulator's; its end is its turn."""
    from live_helpers import wait_for
    from marketsched.platform.executor import LocalExecutor

    rec = Recorder()
    m, clock = make(tmp_path / "h", 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]
    b = m.submit("bob", 5.0, 2.0, "true")["id"]
    c = m.submit("carol", 0.5, 10.0, "true")["id"]
    assert m.state[a] == "queued" and m.held == {a}
    m.exited(a)  # its process's end, heard while A waits
    m.exited(a)  # heard twice: recorded once
    assert m.state[a] == "queued" and [x["kind"] for x in m.store.events(a)][-1] == "exited"
    clock.set(2.0)
    assert m.tick() == [b]
    assert (m.state[a], m.state[b], m.state[c]) == ("completed", "stopped", "running")
    assert rec.calls == [("launch", a), ("stop", a), ("launch", b), ("kill", b), ("launch", c)]
    assert [x["kind"] for x in m.store.events(a)] == ["node", "start", "unstart", "exited", "start", "completed"]
    e, (ra, rb, rc) = m.engine, (m.job_row[a], m.job_row[b], m.job_row[c])
    assert (e.first_start[ra], e.end_time[ra], e.first_start[rc], m.next_stop()) == (2.0, 2.0, 2.0, 12.0)
    sim, pol = simulated([(0, "alice", 1.0, 10.0), (0, "bob", 5.0, 2.0), (0, "carol", 0.5, 10.0)], 1, True)
    assert [sim.first_start[ra], sim.first_start[rb], sim.end_time[rb]] == [e.first_start[ra], e.first_start[rb],
                                                                           e.end_time[rb]]
    assert sim.preemptions.tolist() == e.preemptions and sim.payment.tolist() == e.payment
    assert (m.balance("alice"), m.balance("bob"), m.balance("carol")) == (102 * MICRO, 98 * MICRO, 100 * MICRO)
    m.store.check_books()

    rec = Recorder()  # preempted after 1 s of progress; its process ends while suspended
    m, clock = make(tmp_path / "p", 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]
    clock.set(1.0)
    b = m.submit("bob", 5.0, 2.0, "true")["id"]
    assert m.state[a] == "preempted"
    m.exited(a)
    clock.set(3.0)
    assert m.tick() == [b] and m.state[a] == "completed"
    assert rec.calls == [("launch", a), ("stop", a), ("launch", b), ("kill", b)]
    assert [x["kind"] for x in m.store.events(a)] == ["node", "start", "preempt", "exited", "resume", "completed"]
    assert (m.engine.end_time[m.job_row[a]], m.engine.preemptions[m.job_row[a]], m.next_stop()) == (3.0, 1, math.inf)
    rec = Recorder()  # cancelled after its process ended: there is nothing to kill
    m, clock = make(tmp_path / "c", 1, preemptive=True, executor=rec)
    a = m.submit("alice", 1.0, 10.0, "true")["id"]
    m.submit("bob", 5.0, 2.0, "true")
    m.exited(a)
    assert m.cancel("alice", a) == "queued" and ("kill", a) not in rec.calls and m.ended == set()

    ex = LocalExecutor(tmp_path / "jobs")  # a real process that ends between its start and the unstart
    runs = tmp_path / "runs"
    try:
        m, clock = make(tmp_path / "x", 1, preemptive=True, executor=ex)
        a = m.submit("alice", 1.0, 10.0, f"echo a >> {runs}")["id"]
        assert wait_for(lambda: ex.exit_code(a) == 0)
        b = m.submit("bob", 5.0, 2.0, "sleep 300")["id"]
        assert m.state[a] == "queued" and m.held == {a}
        ended: list = []
        assert wait_for(lambda: ended.extend(ex.exits()) or ended)
        assert ended == [(a, 0)]
        m.exited(a)
        clock.set(2.0)
        assert m.tick() == [b] and m.state[a] == "completed" and m.next_stop() == math.inf
        assert runs.read_text() == "a\n" and a not in ex.procs and b not in ex.procs
        m.store.check_books()
    finally:
        for key in list(ex.procs):
            ex.kill(key)
