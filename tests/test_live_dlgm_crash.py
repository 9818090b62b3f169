"""Books exact under kill -9 for the DLGM market: the exactly-once checks of
``tests/test_live_exactly_once.py`` (its scripted executor, no processes, an injected clock)
for a served DLGM or P-DLGM market that dies at every point where a decision is committed but
its effect on a process is not yet carried out, and a real ``kill -9`` of ``market serve
--mechanism pdlgm`` with processes that outlive it."""

from __future__ import annotations

import pytest

from live_helpers import BrokerRestarts, user_clients, wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dlgm_service import DLGMService, replay_recorded
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, Store
from test_live_exactly_once import Crash, FakeOS, ScriptedExecutor

# (release, owner, weight, reported run time) on two nodes: queues, overtakes with
# compensations and, under P-DLGM, preemptions (the hand example of tests/test_live_dlgm.py)
SCRIPT = [(0, "alice", 1.0, 8.0), (1, "carol", 1.0, 6.0), (2, "alice", 1.5, 4.0), (3, "bob", 4.0, 2.0),
          (4, "carol", 1.0, 1.0), (4.5, "bob", 3.0, 1.0)]


def start(tmp_path, clock, fake_os, preemptive, first=False, slots=2):
    ex = ScriptedExecutor(tmp_path / "jobs")
    b = Broker(tmp_path / "market", MarketConfig(slots=slots, single_user=True), clock=clock, executor=ex)
    if first:
        b.ensure_admin()
        for u in ("alice", "bob", "carol"):
            b.add_user(True, u, 100)
    dx = ScriptedExecutor(tmp_path / "dlgm", os=fake_os)
    b.dlgm = DLGMService(b, preemptive, executor=dx)
    return b, dx


# cancellations (time, owner, job id): a queued job in both markets, and one that P-DLGM has
# preempted (its suspended process is killed) and DLGM keeps queued
CANCELS = [(4.7, "alice", 3), (4.8, "carol", 5)]


def ops(script, cancels=()):
    """The market's operations in time order: each submission and cancellation, and a loop round
    at each stop."""
    return sorted([("submit", *s) for s in script] + [("cancel", *c) for c in cancels],
                  key=lambda op: op[1]) + [("until", 100.0)]


@pytest.mark.parametrize("preemptive", [False, True])
@pytest.mark.parametrize("hook,nth", [("on_launch", 1), ("on_launch", 3), ("after_launch", 2), ("on_kill", 1),
                                      ("on_kill", 3)])
def test_crash_between_commit_and_effect_books_exact_and_each_job_runs_once(tmp_path, preemptive, hook, nth):
    """The market dies at the ``nth`` launch (before the process starts, or once it runs) or
    kill; a new market on the same database and machine carries on. Every job's process is
    launched at most once, none still runs at the end, the ledger balances to the micro-unit and
    the whole run, with its cancellations, replays through the simulator exactly as if nothing
    had happened."""
    clock = FakeClock(0.0)
    fos = FakeOS()
    b, dx = start(tmp_path, clock, fos, preemptive, first=True)
    seen = {"n": 0, "crashed": False}

    def hooked(key):
        seen["n"] += 1
        if seen["n"] == nth and not seen["crashed"]:
            seen["crashed"] = True
            raise Crash

    setattr(dx, hook, hooked)
    for op in ops(SCRIPT, CANCELS):
        t = op[1]
        submitting = False  # the operation was sent (a crash after it must not repeat it)
        while not submitting:
            try:
                svc = b.dlgm
                while svc.market.next_stop() <= t:
                    clock.set(svc.market.next_stop())
                    svc.step()
                clock.set(t)
                if op[0] == "submit":
                    submitting = True
                    svc.submit(op[2], op[3], op[4], "work")
                elif op[0] == "cancel":
                    submitting = True
                    svc.cancel(op[2], False, op[3])
                break
            except Crash:  # the market died once the operation was committed; a new one starts
                b.store.close()
                b, dx = start(tmp_path, clock, fos, preemptive)
    assert seen["crashed"]
    assert len(fos.launches) == len(set(fos.launches))  # no process launched twice
    assert fos.alive == {}  # every job's process was killed (stopped at its reported time) or ended
    assert [b.dlgm.job("admin", True, j)["state"] for _, _, j in CANCELS] == ["cancelled", "cancelled"]
    r = replay_recorded(b.store)
    assert r["live"] == r["simulated"] and r["differ"] == []
    books = b.store.check_books()
    assert books["users"] == books["deposits"] == 300_000_000 and books["revenue"] == 0


def test_a_preempted_job_whose_process_vanished_while_down_starts_again_when_it_resumes(tmp_path):
    """P-DLGM on one node: A runs, B preempts it; the market dies and A's frozen process is
    killed meanwhile. At restart B is re-attached; when B is stopped at its reported time, A
    resumes: its process is launched again (once), for the time it had left, and the run still
    replays through the simulator exactly."""
    clock = FakeClock(0.0)
    fos = FakeOS()
    ex = ScriptedExecutor(tmp_path / "jobs")
    b = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True), clock=clock, executor=ex)
    b.ensure_admin()
    for u in ("alice", "bob"):
        b.add_user(True, u, 100)
    b.dlgm = DLGMService(b, True, executor=ScriptedExecutor(tmp_path / "dlgm", os=fos))
    a = b.dlgm.submit("alice", 1.0, 10.0, "work")["id"]
    clock.set(2)
    bj = b.dlgm.submit("bob", 5.0, 2.0, "work")["id"]
    assert b.dlgm.market.state[a] == "preempted"
    b.store.close()  # the market dies
    del fos.alive[a]  # A's process is killed while the market is down
    clock.set(3)
    b = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True), clock=clock,
               executor=ScriptedExecutor(tmp_path / "jobs"))
    dx = ScriptedExecutor(tmp_path / "dlgm", os=fos)
    b.dlgm = DLGMService(b, True, executor=dx)
    assert b.dlgm.market.state == {a: "preempted", bj: "running"}
    for t in (4, 12):
        clock.set(t)
        b.dlgm.step()
    assert fos.launches == [a, bj, a] and fos.alive == {}
    assert [e["kind"] for e in b.dlgm.job("admin", True, a)["events"]] == \
        ["node", "start", "preempt", "resume", "relaunch", "stopped"]
    r = replay_recorded(b.store)
    assert r["live"] == r["simulated"] and r["differ"] == []
    b.store.check_books()


@pytest.mark.parametrize("when", ["at the loop", "at the loop, then a restart", "while the market was down"])
def test_a_held_job_whose_process_ended_completes_at_its_turn_runs_once_and_replays(tmp_path, when):
    """P-DLGM on one node, served on the scripted executor: A starts at 0 and B takes the start
    back at the same instant (A held, its process suspended); A's process had ended within that
    instant. The market hears of it at its loop (and then may die and restart), or finds A's
    exit code when it restarts after being down. At B's reported time A starts and completes at
    once: its process is neither continued nor launched again (before, on an executor that does
    not remember its launches, as Slurm's, the market launched A's command a second time and kept
    the node until A's reported run time). The record replays through the simulator to the same
    nodes, first starts (a start taken back is no start), preemptions and money; only A's end
    differs, and the replay says so."""
    clock = FakeClock(0.0)
    fos = FakeOS()
    b, dx = start(tmp_path, clock, fos, True, first=True, slots=1)
    a = b.dlgm.submit("alice", 1.0, 10.0, "work")["id"]
    bj = b.dlgm.submit("bob", 5.0, 2.0, "work")["id"]
    assert b.dlgm.market.state[a] == "queued" and b.dlgm.market.held == {a}
    clock.set(0.5)
    if when == "while the market was down":
        b.store.close()
        del fos.alive[a]  # its wrapper wrote the exit code
        dx.workdir(a).mkdir(parents=True)
        (dx.workdir(a) / "exit_code").write_text("0\n")
        b, dx = start(tmp_path, clock, fos, True, slots=1)
    else:
        dx.ended = [(a, 0)]
        b.dlgm.step()
        if when != "at the loop":
            b.store.close()
            b, dx = start(tmp_path, clock, fos, True, slots=1)
    assert b.dlgm.market.state == {a: "queued", bj: "running"}
    for t in (2, 12):
        clock.set(t)
        b.dlgm.step()
    assert fos.launches == [a, bj] and ("cont", a) not in dx.log and fos.alive == {}
    job = b.dlgm.job("admin", True, a)
    assert job["state"] == "completed" and job["note"].startswith("exit code 0")
    assert [(e["kind"], e["t"]) for e in job["events"]] == \
        [("node", 0), ("start", 0), ("unstart", 0), ("exited", 0.5), ("start", 2), ("completed", 2)]
    r = replay_recorded(b.store)
    live, sim = r["live"], r["simulated"]
    assert live["node"] == sim["node"] and live["preemptions"] == sim["preemptions"] and live["paid"] == sim["paid"]
    assert live["first_start"] == sim["first_start"] == [2.0, 0.0]
    assert (live["end"], sim["end"]) == ([2.0, 2.0], [12.0, 2.0])
    assert r["differ"] == [(a, "end", 2.0, 12.0, "its process ended before its reported run time")]
    assert live["paid"] == {"alice": -2 * MICRO, "bob": 2 * MICRO}
    b.store.check_books()


def test_kill_9_of_a_served_pdlgm_market(tmp_path):
    """``market serve --mechanism pdlgm`` killed with -9 while one job runs and one is
    preempted: the restarted market re-attaches both processes (same pids), the preempted
    one stays frozen until its turn, no job's process starts twice, the queues are the ones
    before the crash and the ledger balances exactly."""
    release = tmp_path / "release"
    starts = tmp_path / "starts.log"
    gated = f'echo "$MARKETSCHED_JOB_ID" >> {starts}; while [ ! -e {release} ]; do sleep 0.05; done'
    with BrokerRestarts(tmp_path, "--slots", 1, "--mechanism", "pdlgm", "--single-user") as brokers:
        admin = brokers.start()
        a = user_clients(admin, ("a",), 100)["a"]
        b = user_clients(admin, ("b",), 200)["b"]
        # reported run times far beyond the test's length: both end when the test releases them
        j1 = a.post("/api/dlgm/jobs", {"weight": 0.001, "runtime": 1e6, "command": gated})["id"]
        assert wait_for(lambda: starts.exists() and starts.read_text().split() == [str(j1)])  # before it is frozen
        j2 = b.post("/api/dlgm/jobs", {"weight": 1, "runtime": 1e5, "command": gated})["id"]  # preempts j1, pays 100
        before = admin.get("/api/dlgm")
        assert {j["id"]: j["state"] for j in before["jobs"]} == {j1: "preempted", j2: "running"}
        assert wait_for(lambda: starts.exists() and sorted(starts.read_text().split()) == [str(j1), str(j2)])
        brokers.kill_9()
        brokers.start()
        after = admin.get("/api/dlgm")
        assert after["nodes"] == before["nodes"]
        assert {j["id"]: j["state"] for j in after["jobs"]} == {j1: "preempted", j2: "running"}
        kinds = [e["kind"] for e in admin.get(f"/api/dlgm/jobs/{j2}")["events"]]
        assert kinds.count("start") == 1 and "reattach" in kinds
        release.touch()
        assert wait_for(lambda: {j["state"] for j in admin.get("/api/dlgm")["jobs"]} == {"completed"}, 120)
        kinds = [e["kind"] for e in admin.get(f"/api/dlgm/jobs/{j1}")["events"]]
        assert kinds.count("start") == 1 and kinds.count("resume") == 1 and "reattach" in kinds
        assert admin.get("/api/balance")["users"]["a"]["balance"] == 100 + 0.001 * 1e5
        assert sorted(starts.read_text().split()) == [str(j1), str(j2)]  # no process started twice
    store = Store(brokers.data)
    books = store.check_books()
    assert books["users"] == books["deposits"] == 300_000_000 and books["revenue"] == 0
    store.close()
