"""EES and relaxed EES as a running market (Mutz 2008, chapters 4 and 6): the head whose value is
below the delay it causes is discarded and told why, the decisions and payments equal the
simulator's on the same arrivals (to the micro-unit), a recorded decision replays from its
recorded generator state, hostile submissions are refused with nothing recorded, relaxed EES packs
jobs by CPU count, and real processes run on the local executor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from marketsched.live.ees import EESConfig, EESMarket, simulate_recorded
from marketsched.live.ees_policy import replay_decision
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, REVENUE, Store, user_account
from marketsched.platform.validation import MarketError, to_micro


class Scripted:
    """An executor without processes: launches and kills are logged; ``ended`` lists the exits
    the next :meth:`exits` reports (the test decides when a process ends)."""

    def __init__(self):
        self.log = []
        self.ended = []

    def launch(self, key, command, env=None, **kw):
        self.log.append(("launch", key, kw.get("limits")))

    def kill(self, key):
        self.log.append(("kill", key))

    def exits(self):
        out, self.ended = self.ended, []
        return out


def make(tmp_path, executor=None, users=("alice", "bob", "carol"), deposit=1000.0, **cfg):
    clock = FakeClock(0.0)
    config = EESConfig(**{"cpus": 1, "n_draws": 50, **cfg})
    m = EESMarket(Store(tmp_path), config, clock, executor if executor is not None else Scripted())
    for u in users:
        m.add_user(u, deposit)
    return m, clock


def until(m, clock, t, ends=None):
    """The market's loop up to ``t`` (excluded: what is due at ``t`` goes with the next call):
    the processes of ``ends`` (job id -> time) exit then, and every stop at a declared run time
    and planned start happens at its time."""
    ends = ends if ends is not None else {}
    while True:
        due = [(e, j) for j, e in ends.items() if m.state.get(j) == "running"]
        nxt = min([m.next_event()] + [e for e, _ in due])
        clock.set(min(nxt, t))
        m.executor.ended = [(j, 0) for e, j in due if e <= clock()]
        if nxt >= t:
            break
        m.tick()


def play(m, clock, script, early=None):
    """Submit ``(t, owner, value, delay cost, runtime, cpus)`` in order; job ``k`` of ``early``
    (script index -> seconds) exits that long after its start; run to the end."""
    ids = []
    early = early or {}
    for k, (t, owner, v, d, r, c) in enumerate(script):
        until(m, clock, t, ends_of(m, ids, early))
        ids.append(m.submit(owner, v, d, r, "true", cpus=c)["id"])
    until(m, clock, 1e7, ends_of(m, ids, early))
    return ids


def ends_of(m, ids, early):
    eng = m.engine
    return {ids[k]: eng.first_start[m.job_row[ids[k]]] + s for k, s in early.items()
            if k < len(ids) and not math.isnan(eng.first_start[m.job_row[ids[k]]])}


def assert_replays_equal(m, stakes=True):
    """The simulator on the recorded arrivals: the same decisions (queue, outcome, payments bit
    for bit); the ledger holds each payment rounded once; each decision replays alone from its
    recorded generator state."""
    sim_policy, rec = simulate_recorded(m)
    live = m.decisions()
    sim = [d for _, _, d in sim_policy.ledger.rows]
    assert len(live) == len(sim) > 0
    assert not stakes or any(len(d["rows"]) > 1 and any(d["payments"]) for d in live)  # money was at stake
    for a, b in zip(live, sim):
        assert a["rows"] == b.job_ids.tolist() and a["runs"] == b.runs
        assert a["payments"] == b.payments.tolist() and a["externality"] == b.externality
    assert rec.first_start.tolist() == pytest.approx(m.engine.first_start, nan_ok=True, abs=0)
    assert rec.state.tolist() == m.engine.state
    # the ledger: one entry per (decision, job) with a non-zero rounded payment
    want: dict[str, int] = {}
    for d in live:
        for r, mu in zip(d["rows"], d["payments"]):
            want[m.owner[r]] = want.get(m.owner[r], 0) - to_micro(mu)
    entries = m.store.entries()
    got: dict[str, int] = {}
    for e in entries:
        if e["kind"] == "ees payment":
            for acct, sign in ((e["from_account"], -1), (e["to_account"], 1)):
                if acct.startswith("user:"):
                    got[acct[5:]] = got.get(acct[5:], 0) + sign * e["amount"]
    assert {u: x for u, x in got.items() if x} == {u: x for u, x in want.items() if x}
    books = m.store.check_books()
    assert abs(books["revenue"]) <= sum(len(d["rows"]) for d in live)  # only the rounding
    cfg = m.config
    for d in live[:: max(1, len(live) // 5)]:
        again = replay_decision(d, cfg.prior, cfg.n_draws, cfg.estimator, cfg.cpus if cfg.relaxed else None)
        assert again.payments.tolist() == d["payments"] and again.runs == d["runs"]


def three_jobs(m, clock, commands=("true", "true", "true")):
    """A (value 50, 10 s) at 0, B (value 5, 20 s) at 1, C (delay cost 0.8, 5 s) at 2."""
    a = m.submit("alice", 50.0, 0.5, 10.0, commands[0])["id"]
    clock.set(1.0)
    b = m.submit("bob", 5.0, 0.1, 20.0, commands[1])["id"]
    clock.set(2.0)
    return a, b, m.submit("carol", 40.0, 0.8, 5.0, commands[2])["id"]


def test_ees_discards_a_head_whose_value_is_below_the_delay_it_causes(tmp_path):
    """One CPU. A (value 50) runs from 0 for its declared 10 s; B (value 5, run time 20) and C
    (delay cost 0.8 per second) wait. At 10 the head B would delay C by 20 s, costing 0.8 x 20 =
    16 > 5: B is discarded and told so with the numbers; C (alone: I = 1) runs and pays 0."""
    m, clock = make(tmp_path)
    a, b, c = three_jobs(m, clock)
    st = m.status()
    assert [q["id"] for q in st["queue"]] == [b, c] and st["head_threshold"] == pytest.approx(16.0)
    assert st["running"] == [a]
    until(m, clock, 10.5)
    vb = m.view(b)
    assert vb["state"] == "discarded"
    assert "value 5 is below the delay it causes, 16 " in vb["note"] and "1 waiting jobs" in vb["note"]
    assert "20 s" in vb["note"]
    assert m.state[c] == "running" and m.view(a)["state"] == "stopped"
    assert ("launch", c, None) in m.executor.log and ("launch", b, None) not in m.executor.log
    d = m.decisions()
    assert [(x["jobs"], x["runs"]) for x in d] == [([a], True), ([b, c], False), ([c], True)]
    assert d[1]["externality"] == pytest.approx(16.0) and d[1]["value"] == 5.0
    assert d[1]["payments"][0] + d[1]["payments"][1] == pytest.approx(0.0, abs=1e-12)  # budget balanced
    paid = sum(e["amount"] if e["from_account"] == user_account("bob") else -e["amount"] for e in m.view(b)["payments"])
    assert paid == to_micro(d[1]["payments"][0]) != 0  # the discarded head's payment, on the ledger
    until(m, clock, 100.0)
    assert_replays_equal(m)


@pytest.mark.parametrize("estimator", ["cached", "shared"])
def test_random_arrivals_decisions_and_payments_equal_the_simulator(tmp_path, estimator):
    """Random reports with ties (values and delay costs on a coarse grid, run times in whole
    seconds), distinct arrival times, some jobs ending before their declared run time: the live
    market's decisions, starts and money equal the simulator's, to the micro-unit."""
    rng = np.random.default_rng(5)
    n = 14
    t = np.sort(rng.choice(np.arange(0.0, 60.0, 0.5), n, replace=False))
    script = [(float(t[i]), ["alice", "bob", "carol"][i % 3], float(rng.integers(0, 11) * 10),
               float(rng.integers(0, 5) / 4), float(rng.integers(1, 9)), None) for i in range(n)]
    early = {k: float(script[k][4]) / 2 for k in range(0, n, 4)}
    m, clock = make(tmp_path, estimator=estimator)
    play(m, clock, script, early)
    states = set(m.state.values())
    assert {"discarded", "completed", "stopped"} <= states, states
    assert_replays_equal(m)


def test_relaxed_ees_packs_jobs_by_cpu_count_and_replays_equal(tmp_path):
    """Four CPUs. A (2 CPUs) and B (2 CPUs) run side by side; C (3 CPUs) cannot start until
    both end and is planned then; D (1 CPU, short) fits beside C and starts at once
    (the greedy schedule of section 6.1.3). Then random arrivals: the simulator's decisions and
    money."""
    ex = Scripted()
    m, clock = make(tmp_path, executor=ex, mechanism="relaxed-ees", cpus=4)
    a = m.submit("alice", 50.0, 0.2, 10.0, "true", cpus=2)["id"]
    clock.set(1.0)
    b = m.submit("bob", 50.0, 0.2, 8.0, "true", cpus=2)["id"]
    assert m.state[a] == m.state[b] == "running"
    clock.set(2.0)
    c = m.submit("carol", 90.0, 0.1, 5.0, "true", cpus=3)["id"]
    assert m.state[c] == "planned" and m.policy.planned_start[m.job_row[c]] == 10.0
    clock.set(3.0)
    d = m.submit("alice", 60.0, 0.1, 4.0, "true", cpus=1)["id"]
    assert m.state[d] == "queued"  # considered at the next completion (C's reservation is held)
    until(m, clock, 9.5)  # B stopped at 9: D fits on 1 of the 2 free CPUs, and beside C from 10
    assert m.state[d] == "running" and m.state[c] == "planned"
    until(m, clock, 30.0)
    eng = m.engine
    assert eng.first_start[m.job_row[c]] == 10.0 and eng.first_start[m.job_row[d]] == 9.0
    limits = {k: lim for kind, k, *rest in ex.log if kind == "launch" for lim in rest}
    assert set(limits) == {a, b, c, d}
    assert_replays_equal(m, stakes=False)  # every decision here has a queue of one
    rng = np.random.default_rng(9)
    m2, clock2 = make(tmp_path / "r", mechanism="relaxed-ees", cpus=4)
    t = np.sort(rng.choice(np.arange(0.0, 40.0, 0.5), 16, replace=False))
    script = [(float(t[i]), ["alice", "bob"][i % 2], float(rng.integers(0, 11) * 10), float(rng.integers(0, 5) / 4),
               float(rng.integers(1, 9)), int(rng.integers(1, 5))) for i in range(16)]
    play(m2, clock2, script, {k: 0.5 for k in range(1, 16, 5)})
    used = [eng.procs[j] for j in range(eng.n_jobs)]
    assert max(used) > 1
    assert_replays_equal(m2)


@pytest.mark.parametrize("field,value,status", [
    ("value", -1.0, 400), ("value", 1e9, 400), ("value", math.nan, 400), ("value", "5", 400),
    ("delay_cost", -0.5, 400), ("delay_cost", math.inf, 400), ("runtime", 1e12, 400), ("runtime", 0.0, 400),
    ("runtime", -3.0, 400), ("cpus", 2, 400), ("cpus", 0, 400), ("cpus", True, 400),
])
def test_hostile_fields_are_refused_with_nothing_recorded(tmp_path, field, value, status):
    m, clock = make(tmp_path)
    m.submit("alice", 50.0, 0.5, 10.0, "true")  # one job in the market
    before = (m.store.balances(), len(m.store.jobs()), m.decisions(), m.engine.n_jobs)
    args = {"value": 10.0, "delay_cost": 0.5, "runtime": 5.0, "cpus": None, field: value}
    with pytest.raises(MarketError) as exc:
        m.submit("bob", args["value"], args["delay_cost"], args["runtime"], "true", cpus=args["cpus"])
    assert exc.value.status == status
    assert (m.store.balances(), len(m.store.jobs()), m.decisions(), m.engine.n_jobs) == before


def test_no_money_unknown_users_and_bad_commands_are_refused(tmp_path):
    m, clock = make(tmp_path, users=("alice",))
    m.add_user("poor", 0.0)
    m.add_user("some", 3.0)
    before = (m.store.balances(), m.store.jobs())
    for user, value, status in (("poor", 1.0, 402), ("some", 3.5, 402), ("mallory", 1.0, 404)):
        with pytest.raises(MarketError) as exc:
            m.submit(user, value, 0.1, 1.0, "true")
        assert exc.value.status == status, user
    for command, status in (("", 400), ("a\x00b", 400), (["ls"], 400), ("x" * 65537, 413)):
        with pytest.raises(MarketError, match="command") as exc:
            m.submit("alice", 1.0, 0.1, 1.0, command)
        assert exc.value.status == status
    assert (m.store.balances(), m.store.jobs()) == before
    assert m.engine.n_jobs == 0 and m.decisions() == []
    assert m.submit("some", 3.0, 0.1, 1.0, "true")["state"] == "running"  # exactly the value: admitted
    m2, _ = make(tmp_path / "cap", users=("alice",), max_jobs_per_user=2)
    m2.submit("alice", 1.0, 0.1, 5.0, "true")
    m2.submit("alice", 1.0, 0.1, 5.0, "true")
    with pytest.raises(MarketError, match="2 jobs waiting or running") as exc:
        m2.submit("alice", 1.0, 0.1, 5.0, "true")  # a queue one party fills is refused
    assert exc.value.status == 429 and len(m2.store.jobs()) == 2
    with pytest.raises(MarketError) as exc:
        m.cancel("alice", 1)
    assert exc.value.status == 404
    m.store.check_books()


def test_a_discarded_job_pays_and_a_waiting_job_is_paid_money_moves_between_owners(tmp_path):
    """The payments of one decision move money between the queued jobs' owners through the
    revenue account, which keeps only the rounding; balances equal deposits less payments."""
    m, clock = make(tmp_path, n_draws=400)
    m.submit("alice", 80.0, 0.9, 10.0, "true")
    for k, who in enumerate(("bob", "carol", "bob")):
        clock.set(1.0 + k)
        m.submit(who, 10.0 + 30 * k, 0.3 + 0.2 * k, 6.0, "true")
    until(m, clock, 100.0)
    d = m.decisions()
    assert any(len(x["rows"]) > 1 for x in d)
    books = m.store.check_books()
    assert books["users"] + books["revenue"] == books["deposits"] == 3000 * MICRO
    assert m.store.balance(REVENUE) == books["revenue"]
    net = {u: m.balance(u) - 1000 * MICRO for u in ("alice", "bob", "carol")}
    assert any(x > 0 for x in net.values()) and any(x < 0 for x in net.values())
    assert sum(net.values()) == -books["revenue"]
    assert m.store.balance(user_account("alice")) == 1000 * MICRO + net["alice"]


def test_real_processes_on_the_local_executor(tmp_path):
    """EES on real processes: the running job's process is killed at its declared run time,
    the discarded job never starts, the next runs and its process's exit completes it."""
    from live_helpers import proc_state, wait_for
    from marketsched.platform.executor import LocalExecutor

    ex = LocalExecutor(tmp_path / "jobs")
    try:
        m, clock = make(tmp_path / "db", executor=ex)
        a = m.submit("alice", 50.0, 0.5, 10.0, "sleep 300")["id"]
        pid = ex.procs[a].pid
        clock.set(1.0)
        b = m.submit("bob", 5.0, 0.1, 20.0, "touch never")["id"]
        clock.set(2.0)
        go = tmp_path / "go"
        c = m.submit("carol", 40.0, 0.8, 5.0, f"while [ ! -e {go} ]; do sleep 0.05; done")["id"]
        clock.set(10.0)
        assert m.tick() == [a]
        assert wait_for(lambda: proc_state(pid) in (None, "Z", "X"))
        assert m.state[b] == "discarded" and b not in ex.procs and m.state[c] == "running"
        go.touch()
        clock.set(12.0)
        assert wait_for(lambda: m.tick() == [c])
        assert m.view(c)["state"] == "completed" and m.view(c)["exit_code"] == 0
        assert not (ex.workdir(b) / "never").exists()
        m.store.check_books()
    finally:
        for key in list(ex.procs):
            ex.kill(key)


def test_a_stop_noticed_late_happens_at_the_declared_run_time(tmp_path):
    """The market wakes only at 50 (a busy machine): A's stop at 10, the decision it triggers and
    C's stop at 15 still happen at their own market times, so the run replays equal."""
    m, clock = make(tmp_path)
    a, b, c = three_jobs(m, clock)
    clock.set(3.0)
    d = m.submit("alice", 30.0, 0.4, 5.0, "true")["id"]
    clock.set(50.0)
    assert m.tick() == [a, c, d]  # stopped at 10, 15 and 20
    e = m.engine
    assert [e.end_time[m.job_row[j]] for j in (a, b)] == [10.0, 10.0] and m.state[b] == "discarded"
    assert e.first_start[m.job_row[c]] == 10.0 and e.end_time[m.job_row[c]] == 15.0
    assert e.end_time[m.job_row[d]] == 20.0
    assert_replays_equal(m)


def test_the_command_runs_a_file_of_submissions_and_replays_it(tmp_path):
    """``marketsched market ees JOBS``: real processes on this machine, a hostile line refused
    and reported, every decision printed, the run replayed equal through the simulator, and a
    second run on the same folder restarts the market (its decisions replayed) first."""
    import json

    from click.testing import CliRunner

    from marketsched.cli import main

    jobs = tmp_path / "jobs.jsonl"
    lines = [{"at": 0, "user": "alice", "value": 50, "delay_cost": 0.5, "runtime": 5, "command": "sleep 0.2"},
             {"at": 0.05, "user": "bob", "value": 1, "delay_cost": 0.1, "runtime": 20, "command": "true"},
             {"at": 0.1, "user": "carol", "value": 40, "delay_cost": 0.8, "runtime": 2, "command": "true"},
             {"at": 0.1, "user": "bob", "value": -3, "delay_cost": 0.8, "runtime": 2, "command": "true"}]
    jobs.write_text("\n".join(map(json.dumps, lines)) + "\n")
    args = ["market", "ees", str(jobs), "--data", str(tmp_path / "m"), "--cpus", "1", "--draws", "20"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "refused (400): bob's job at 0.1 s: value -3.0 is outside" in res.output
    assert "job 1 runs: value 50 vs delay 0 (1 queued)" in res.output
    assert "replay through the simulator: the same" in res.output
    res2 = CliRunner().invoke(main, args)
    assert res2.exit_code == 0, res2.output
    assert res2.output.count("submitted") == 3 and "replay through the simulator: the same" in res2.output
    store = Store(tmp_path / "m")
    assert len(store.jobs()) == 6 and {j["state"] for j in store.jobs()} <= {"completed", "discarded", "stopped"}
    store.check_books()


def test_relaxed_ees_packs_real_processes(tmp_path):
    """Relaxed EES on real processes, two CPUs: two 1-CPU jobs run side by side, a 2-CPU job is
    planned behind them and starts when their processes exit; the run replays equal."""
    from live_helpers import wait_for
    from marketsched.platform.executor import LocalExecutor

    ex = LocalExecutor(tmp_path / "jobs")
    try:
        m, clock = make(tmp_path / "db", executor=ex, mechanism="relaxed-ees", cpus=2)
        go = tmp_path / "go"
        wait = f"while [ ! -e {go} ]; do sleep 0.05; done"
        a = m.submit("alice", 50.0, 0.5, 10.0, wait, cpus=1)["id"]
        clock.set(1.0)
        b = m.submit("bob", 50.0, 0.5, 10.0, wait, cpus=1)["id"]
        clock.set(2.0)
        c = m.submit("carol", 40.0, 0.8, 5.0, "true", cpus=2)["id"]
        assert {a, b} <= set(ex.procs) and m.state[c] == "planned" and c not in ex.procs
        go.touch()
        clock.set(4.0)

        def ended(*jobs):
            m.tick()  # the exits the executor has found by now
            return all(m.state[j] == "completed" for j in jobs)

        assert wait_for(lambda: ended(a, b))
        assert m.engine.first_start[m.job_row[c]] == 4.0  # compressed: its plan moved up to the exits
        assert wait_for(lambda: ended(c))
        assert_replays_equal(m, stakes=False)
        m.store.check_books()
    finally:
        for key in list(ex.procs):
            ex.kill(key)
