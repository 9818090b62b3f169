"""The trust rule of contracts run by their provider's agent (:mod:`marketsched.exchange.agent_runs`),
checked against a plain restatement on random outcomes: reports posted through the API's
functions in process (no agent process, a fake clock), at random times, with random ends and
exit statuses; the exchange settles at the reports and at the deadlines. Books exact."""

from __future__ import annotations

import base64
import hashlib
import os
import types

import numpy as np
import pytest

from exchange_helpers import agent_exchange
from marketsched.exchange.agent_runs import REPORT_GRACE, report_ended
from marketsched.exchange.api import ExchangeService
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock
from marketsched.platform.validation import MarketError


def reference(report: tuple | None) -> str:
    """The trust rule, plainly: delivered only for a report taken by the deadline saying the
    job exited 0 or still ran at its window's end; anything else fails, at the provider's cost."""
    if report is None:
        return "failed"
    end, code, on_time = report
    return "delivered" if on_time and (end == "window" or (end == "exit" and code == 0)) else "failed"


def body(end: str, code: int | None) -> dict:
    out = b"result\n"
    got = {"end": end, "digest": hashlib.sha256(out).hexdigest(), "output": base64.b64encode(out).decode(),
           "output_bytes": len(out)}
    return got if code is None else {**got, "code": code}


@pytest.mark.parametrize("seed", range(4))
def test_random_reports_settle_by_the_trust_rule(tmp_path, seed):
    rng = np.random.default_rng(seed)
    data = tmp_path / "ex"
    clock = FakeClock()
    ex = agent_exchange(data, clock, ("p",), 8, 512, 40)
    for u in range(6):
        ex.submit_request(f"u{u}", 5.0, 1, 8, 2, 2, "true")  # one slot, six contracts at once
    ex.clear()
    contracts = ex.store.contracts()
    assert len(contracts) == 6
    service = ExchangeService(ExchangeStore(data), clock)
    c0 = contracts[0]
    clock.set(c0["start_t"])
    ex.execute()  # every run published
    deadline = c0["end_t"] + REPORT_GRACE
    # each contract: no report, or a report (end, code) at a time before or after the deadline
    plan: dict[int, tuple | None] = {}
    for c in contracts:
        if rng.random() < 0.2:
            plan[c["id"]] = None
            continue
        end = str(rng.choice(["exit", "window", "signal", "not-started"]))
        code = int(rng.choice([0, 0, 1, 3])) if end == "exit" else None
        at = float(rng.choice([c0["start_t"] + 1, c0["end_t"], deadline - 1, deadline, deadline + 5]))
        plan[c["id"]] = (end, code, at)
    for cid, p in sorted(plan.items(), key=lambda kv: kv[1][2] if kv[1] else 0.0):
        if p is None:
            continue
        clock.set(max(clock(), p[2]))
        if p[2] < deadline:
            report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        else:
            with pytest.raises(MarketError, match="is late"):
                report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        ex.execute()
    clock.set(max(clock(), deadline))
    ex.execute()
    for c in ex.store.contracts():
        p = plan[c["id"]]
        want = reference(None if p is None else (p[0], p[1], p[2] < deadline))
        assert c["state"] == want, (c["id"], p, c["note"])
    ex.store.check_books()
    user = sum(ex.store.ledger.balance(f"user:u{u}") for u in range(6))
    paid = sum(c["user_price"] for c in ex.store.contracts() if c["state"] == "delivered")
    penalties = sum(c["penalty"] for c in ex.store.contracts() if c["state"] == "failed")
    assert user == penalties - paid
    service.store.close()
    service.close()
    ex.store.close()


class Crash(BaseException):
    """The agent is killed (kill -9) at this point."""


class Machine:
    """What outlives an agent: its jobs' processes, their state files (``went``: the go was
    sent) and the exit statuses their wrappers wrote (a job killed with its cgroup writes none),
    with when they wrote them (``ended``, on the agent's wall clock)."""

    def __init__(self):
        self.alive: set[int] = set()
        self.states: dict[int, dict] = {}
        self.codes: dict[int, int] = {}
        self.ended: dict[int, float] = {}


class FakeExecutor:
    """The local executor's interface as :class:`~marketsched.exchange.providers.LocalBackend`
    and the agent use it, on a :class:`Machine` (no processes); ``on_forget`` may raise."""

    contained = False
    layout = types.SimpleNamespace(cpuset=None)

    def __init__(self, root, machine: Machine, on_forget=None):
        self.root, self.machine, self.on_forget = root, machine, on_forget
        self.procs: dict[int, object] = {}
        self.launched: set[int] = set()
        self.ended_usage: dict = {}

    def workdir(self, key):
        return self.root / f"job-{key}"

    def launch(self, key, command, env=None, **kw):
        self.machine.alive.add(key)
        self.machine.states[key] = {"went": True}
        self.procs[key] = object()
        self.launched.add(key)

    def kill(self, key):
        self.machine.alive.discard(key)
        self.procs.pop(key, None)

    def forget(self, key):
        if self.on_forget is not None:
            self.on_forget(key)
        self.machine.states.pop(key, None)

    def went(self, key):
        return bool(self.machine.states.get(key, {}).get("went"))

    def adopt(self, key, *args):
        if key not in self.machine.alive or key not in self.machine.states:
            return None
        self.procs[key] = object()
        return self.procs[key]

    def exit_code(self, key):
        return self.machine.codes.get(key)

    def exit_time(self, key):
        return self.machine.ended.get(key)

    def cpu_seconds(self, key):
        return 1.0 if key in self.procs else 0.0

    def exits(self):
        return []

    def usage(self, key):
        return {"cpu_seconds": self.cpu_seconds(key), "peak_memory": None, "limits": None}

    def shutdown(self, kill=False):
        pass


class InProcess:
    """The agent's client, calling the API's functions in process as provider ``p``;
    ``crash_on_ended``: the agent dies as it would post its end report (before it is sent)."""

    def __init__(self, service, crash_on_ended=False):
        self.service, self.crash_on_ended = service, crash_on_ended
        self.who = ("provider", "p")
        self.down = False  # the exchange cannot be reached (killed, restarting)
        self.lose_answer = False  # the exchange takes an end report and dies before answering

    def get(self, path):
        from marketsched.exchange.agent_runs import list_runs

        return {"name": "p"} if path == "/api/me" else list_runs(self.service, self.who)

    def post(self, path, body):
        from marketsched.exchange.agent_runs import report_started
        from marketsched.platform.client import ClientError

        cid, what = path.split("/")[-2:]
        if what == "ended" and self.crash_on_ended:
            raise Crash
        if self.down:
            raise ClientError("cannot reach the market: Connection refused", 0)
        try:
            got = report_started(self.service, self.who, cid) if what == "started" else \
                report_ended(self.service, self.who, cid, body)
        except MarketError as exc:
            raise ClientError(str(exc), exc.status) from None
        if what == "ended" and self.lose_answer:
            raise ClientError("cannot reach the market: Connection reset by peer", 0)
        return got


SKEW = 1000.0  # the agent's wall clock minus the exchange's


class AgentOnMachine:
    """One contract of provider ``p`` (an agent provider) whose run is published, the API's
    service in process, and agents (:meth:`keeper`) on a :class:`Machine` with their own clocks:
    ``now`` (the monotonic clock their windows' ends are read on) and a wall clock :data:`SKEW`
    seconds ahead of the exchange's."""

    def __init__(self, tmp_path, monkeypatch):
        from marketsched.exchange import agent_jobs, providers

        self.work = tmp_path / "agent"
        self.clock = FakeClock()
        self.ex = agent_exchange(tmp_path / "ex", self.clock, ("p",), 8, 512, 40)
        self.ex.submit_request("u", 5.0, 1, 8, 2, 2, "true")
        self.ex.clear()
        (self.c,) = self.ex.store.contracts()
        self.clock.set(self.c["start_t"])
        self.ex.execute()  # the run published
        self.service = ExchangeService(ExchangeStore(tmp_path / "ex"), self.clock)
        self.machine, self.now, self.on_forget = Machine(), [0.0], None
        monkeypatch.setattr(agent_jobs, "time", types.SimpleNamespace(monotonic=lambda: self.now[0],
                                                                      time=lambda: self.clock() + SKEW,
                                                                      time_ns=lambda: 1))
        real = providers.LocalBackend
        monkeypatch.setattr(providers, "LocalBackend", lambda root, containment: real(
            root, "none", FakeExecutor(root, self.machine, self.on_forget)))
        self.agent_jobs = agent_jobs

    def keeper(self, client):
        return self.agent_jobs.RunKeeper(client, self.work, log=lambda m: None, provider="p")

    def run(self, column: str):
        return self.service.store.rows(f"SELECT {column} FROM ex_runs WHERE contract = ?", (self.c["id"],))[0][0]

    def window_ends(self) -> None:
        self.now[0] += self.c["end_t"] - self.c["start_t"]  # on the agent's clock
        self.clock.set(self.c["end_t"])

    def delivered_and_paid(self) -> None:
        """Settled at the report deadline: delivered, the provider paid, books exact."""
        self.settled("delivered")

    def settled(self, state: str) -> None:
        """Settled at the report deadline as ``state``: the provider paid (delivered) or paying
        the penalty (failed), books exact."""
        assert not list((self.work / "records").iterdir())  # the record goes with the report
        self.clock.set(self.c["end_t"] + REPORT_GRACE)
        self.ex.execute()
        got = self.ex.store.contract(self.c["id"])
        assert got["state"] == state, got["note"]
        want = self.c["provider_price"] if state == "delivered" else -got["penalty"]
        assert self.ex.store.ledger.balance("provider:p") == want
        self.ex.store.check_books()
        self.service.store.close()
        self.service.close()
        self.ex.store.close()


@pytest.mark.parametrize("dies", ["after the kill", "before the report"])
def test_an_agent_killed_in_the_stop_at_a_windows_end_reports_the_window(tmp_path, monkeypatch, dies):
    """The agent stops a job still running at its window's end and is killed (kill -9) before its
    report reaches the exchange: ``after the kill`` (its state file not yet dropped) or ``before
    the report`` (dropped). The agent started again on its folder reports the run ``window``, as
    the uninterrupted agent would have: the contract is delivered and paid, never the provider's
    failure for the agent's own stop (the job left no exit status, killed with its cgroup)."""
    m = AgentOnMachine(tmp_path, monkeypatch)
    cid = m.c["id"]

    def dying_forget(key):
        if key not in m.machine.alive:  # the agent's stop killed the job: it dies now
            raise Crash

    m.on_forget = dying_forget if dies == "after the kill" else None
    first = m.keeper(InProcess(m.service, crash_on_ended=dies == "before the report"))
    first.step(1)
    assert cid in m.machine.alive and m.run("started_t") is not None
    m.window_ends()
    with pytest.raises(Crash):
        first.step(0)
    assert cid not in m.machine.alive and m.run("reported_t") is None
    m.on_forget = None
    m.keeper(InProcess(m.service)).step(0)
    assert (m.run("end"), m.run("code")) == ("window", None)
    m.delivered_and_paid()


@pytest.mark.parametrize("end", ["window", "exit"])
def test_an_end_report_the_exchange_did_not_take_is_sent_again(tmp_path, monkeypatch, end):
    """The agent's end report cannot reach the exchange (killed, restarting: nothing of the report
    was recorded). The agent keeps it and sends it again at its next steps until the exchange
    answers: the run is delivered and paid, never failed at its deadline for the exchange's own
    outage. Sent again after the exchange had taken it (its answer lost), it is refused (one report
    per run) and dropped, moving nothing."""
    m = AgentOnMachine(tmp_path, monkeypatch)
    cid = m.c["id"]
    client = InProcess(m.service)
    keeper = m.keeper(client)
    keeper.step(1)
    if end == "exit":  # the job exits 0 by itself
        m.machine.alive.discard(cid)
        m.machine.codes[cid] = 0
        keeper.backend.executor.exits = lambda: [(cid, 0)]
    else:
        m.window_ends()
    client.down = True
    keeper.step(0)
    keeper.backend.executor.exits = lambda: []
    assert m.run("reported_t") is None
    keeper.step(0)  # still down
    client.down, client.lose_answer = False, True
    keeper.step(0)  # taken, its answer lost
    assert (m.run("end"), m.run("code")) == (end, 0 if end == "exit" else None)
    assert list((m.work / "records").iterdir())  # kept: no answer came
    client.lose_answer = False
    keeper.step(0)  # refused as a second report: dropped
    m.delivered_and_paid()


@pytest.mark.parametrize("ended", [-1.0, 0.0, 2.0, None])
def test_a_job_that_ended_while_its_agent_was_down_is_judged_by_its_end_against_its_window(tmp_path, monkeypatch,
                                                                                         ended):
    """The agent is killed (kill -9) while its run's job runs; the job exits 1 ``ended`` seconds
    after its window's end (on the agent's wall clock, which is not the exchange's), and the agent
    restarts after the window's end. A job that ended before the window's end is reported ``exit``
    1 and fails at its provider's cost, as with an agent up; one that ended at or after the
    window's end was running there, where an agent up would have stopped it: reported ``window``,
    delivered and paid, never a penalty for the agent's downtime. A job that left no exit status
    (``None``: killed with its cgroup) has no end time: reported ``exit`` without a status."""
    m = AgentOnMachine(tmp_path, monkeypatch)
    cid = m.c["id"]
    m.keeper(InProcess(m.service)).step(1)  # then killed: its job runs on
    assert cid in m.machine.alive and m.run("started_t") is not None
    m.machine.alive.discard(cid)
    if ended is not None:
        m.machine.codes[cid] = 1
        m.machine.ended[cid] = m.c["end_t"] + ended + SKEW
    m.clock.set(m.c["end_t"] + 5.0)  # the restart, before the report deadline
    m.keeper(InProcess(m.service)).step(0)
    if ended is not None and ended >= 0:
        assert (m.run("end"), m.run("code")) == ("window", None)
        m.settled("delivered")
    else:
        assert (m.run("end"), m.run("code")) == ("exit", None if ended is None else 1)
        m.settled("failed")


def test_a_jobs_end_time_is_its_exit_status_files_time_never_through_a_link(tmp_path):
    """The end time the agent reads (:meth:`JobFolders.exit_time`) is the modification time of
    the ``exit_code`` file the job's wrapper wrote; a missing file, or a link in its place (a job
    may write into its folder), gives none."""
    from marketsched.platform.executor import JobFolders

    folders = JobFolders()
    folders.root = tmp_path
    assert folders.exit_time(1) is None
    (tmp_path / "job-1").mkdir()
    assert folders.exit_time(1) is None
    (tmp_path / "job-1" / "exit_code").write_text("3\n")
    os.utime(tmp_path / "job-1" / "exit_code", (1234.5, 1234.5))
    assert folders.exit_time(1) == 1234.5 and folders.exit_code(1) == 3
    (tmp_path / "elsewhere").write_text("0\n")
    (tmp_path / "job-1" / "exit_code").unlink()
    (tmp_path / "job-1" / "exit_code").symlink_to(tmp_path / "elsewhere")
    assert folders.exit_time(1) is None and folders.exit_code(1) is None
