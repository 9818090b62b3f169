"""The trust rule of contracts run by their provider's agent (:mod:`marketsched.exchange.agent_runs`),
checked against a plain restatement on random outcomes: reports posted through the API's
functions in process (no agent process, a fake clock), at random times, with random ends and
exit statuses; the exchange settles at the reports and at the deadlines. Books exact."""

from __future__ import annotations

import base64
import hashlib
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
    sent) and the exit statuses their wrappers wrote (a job killed with its cgroup writes none)."""

    def __init__(self):
        self.alive: set[int] = set()
        self.states: dict[int, dict] = {}
        self.codes: dict[int, int] = {}


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

    def cpu_seconds(self, key):
        return 1.0 if key in self.procs else 0.0

    def exits(self):
        return []

    def shutdown(self, kill=False):
        pass


class InProcess:
    """The agent's client, calling the API's functions in process as provider ``p``;
    ``crash_on_ended``: the agent dies as it would post its end report (before it is sent)."""

    def __init__(self, service, crash_on_ended=False):
        self.service, self.crash_on_ended = service, crash_on_ended
        self.who = ("provider", "p")

    def get(self, path):
        from marketsched.exchange.agent_runs import list_runs

        return {"name": "p"} if path == "/api/me" else list_runs(self.service, self.who)

    def post(self, path, body):
        from marketsched.exchange.agent_runs import report_started
        from marketsched.platform.client import ClientError

        cid, what = path.split("/")[-2:]
        if what == "ended" and self.crash_on_ended:
            raise Crash
        try:
            return report_started(self.service, self.who, cid) if what == "started" else \
                report_ended(self.service, self.who, cid, body)
        except MarketError as exc:
            raise ClientError(str(exc), exc.status) from None


@pytest.mark.parametrize("dies", ["after the kill", "before the report"])
def test_an_agent_killed_in_the_stop_at_a_windows_end_reports_the_window(tmp_path, monkeypatch, dies):
    """The agent stops a job still running at its window's end and is killed (kill -9) before its
    report reaches the exchange: ``after the kill`` (its state file not yet dropped) or ``before
    the report`` (dropped). The agent started again on its folder reports the run ``window``, as
    the uninterrupted agent would have: the contract is delivered and paid, never the provider's
    failure for the agent's own stop (the job left no exit status, killed with its cgroup)."""
    from marketsched.exchange import agent_jobs, providers

    data = tmp_path / "ex"
    clock = FakeClock()
    ex = agent_exchange(data, clock, ("p",), 8, 512, 40)
    ex.submit_request("u", 5.0, 1, 8, 2, 2, "true")
    ex.clear()
    (c,) = ex.store.contracts()
    clock.set(c["start_t"])
    ex.execute()  # the run published
    service = ExchangeService(ExchangeStore(data), clock)
    machine, now = Machine(), [0.0]
    monkeypatch.setattr(agent_jobs, "time", types.SimpleNamespace(monotonic=lambda: now[0], time_ns=lambda: 1))
    on_forget = [None]
    real = providers.LocalBackend
    monkeypatch.setattr(providers, "LocalBackend", lambda root, containment: real(
        root, "none", FakeExecutor(root, machine, on_forget[0])))

    def dying_forget(key):
        if key not in machine.alive:  # the agent's stop killed the job: it dies now
            raise Crash

    on_forget[0] = dying_forget if dies == "after the kill" else None
    first = agent_jobs.RunKeeper(InProcess(service, crash_on_ended=dies == "before the report"), tmp_path / "agent",
                                 log=lambda m: None, provider="p")
    first.step(1)
    assert c["id"] in machine.alive and run_row_of(service, c["id"], "started_t") is not None
    now[0] += c["end_t"] - c["start_t"]  # the window's end on the agent's clock
    clock.set(c["end_t"])
    with pytest.raises(Crash):
        first.step(0)
    assert c["id"] not in machine.alive and run_row_of(service, c["id"], "reported_t") is None
    on_forget[0] = None
    again = agent_jobs.RunKeeper(InProcess(service), tmp_path / "agent", log=lambda m: None, provider="p")
    again.step(0)
    assert (run_row_of(service, c["id"], "end"), run_row_of(service, c["id"], "code")) == ("window", None)
    assert not list((tmp_path / "agent" / "records").iterdir())  # the record goes with the report
    clock.set(c["end_t"] + REPORT_GRACE)
    ex.execute()
    got = ex.store.contract(c["id"])
    assert got["state"] == "delivered", got["note"]
    assert ex.store.ledger.balance("provider:p") == c["provider_price"]
    ex.store.check_books()
    service.store.close()
    service.close()
    ex.store.close()


def run_row_of(service, cid: int, column: str):
    return service.store.rows(f"SELECT {column} FROM ex_runs WHERE contract = ?", (cid,))[0][0]
