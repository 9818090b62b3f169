"""Contracts run by their provider's agent (provider kind ``agent``, :mod:`marketsched.exchange.agent_runs`):
a real agent process (``marketsched exchange provider run``) runs a real job on its own executor and
reports it over the API; the exchange (an injected clock) settles by the trust rule: the user pays
only for a result delivered by the window's end + the grace; no report, or a reported failure, makes
the provider pay its penalty. Hostile reports are refused and named. Books exact in every case."""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import time

import pytest

from exchange_helpers import agent_exchange, api_with_agents, run_row, start_agent
from marketsched.exchange.agent_runs import REPORT_GRACE
from marketsched.exchange.api import issue_token
from marketsched.live.cli import Client, ClientError
from marketsched.platform.clock import FakeClock

HANG = 60.0  # seconds before a test that hangs is failed (never reached when it works)


@pytest.fixture
def market(tmp_path):
    """An exchange (critical-value, fake clock) with agent providers p1 and p2 (one node of 2 CPU
    units each, offered for 50 slots), user u's token, the providers' tokens, the API on 127.0.0.1."""
    data = tmp_path / "ex"
    clock = FakeClock()
    ex = agent_exchange(data, clock, ("p1", "p2"), 2, 64, 50)
    tokens = {name: issue_token(ex.store, role, name, 0.0) for role, name in
              (("provider", "p1"), ("provider", "p2"), ("user", "u"))}
    with api_with_agents(data, clock, HANG) as (srv, agents):
        yield ex, clock, srv, tokens, data, agents, tmp_path
    ex.store.close()


def contract_for(ex, clock, command: str, first: int = 2, last: int = 2) -> dict:
    """One request of user u (1 CPU unit) cleared into a contract; the clock at its window's start
    and the contract's run published (the exchange's execute)."""
    ex.submit_request("u", 5.0, 1, 8, first, last, command)
    ex.clear()
    (c,) = [c for c in ex.store.contracts() if c["state"] == "pending"]
    clock.set(c["start_t"])
    ex.execute()
    assert ex.store.contract(c["id"])["state"] == "running"
    return ex.store.contract(c["id"])


def wait_for(cond, what: str) -> None:
    end = time.monotonic() + HANG
    while not cond():
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.02)


def money(ex, c: dict) -> tuple[int, int]:
    return ex.store.ledger.balance("user:u"), ex.store.ledger.balance(f"provider:{c['provider']}")


def run_to_report(market, command: str) -> tuple[dict, dict]:
    """A contract of ``command`` run by its provider's agent (a real process) until its report;
    the exchange's next step settles it. Returns the contract before and after."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c = contract_for(ex, clock, command)
    start_agent(srv, tokens[c["provider"]], data, tmp / "agent", agents)
    wait_for(lambda: run_row(ex, c["id"], "reported_t") is not None, "the agent's report")
    ex.execute()
    return c, ex.store.contract(c["id"])


def test_a_contract_runs_on_its_agent_and_settles_delivered(market):
    """The agent runs the job, reports exit 0 with its output; the exchange settles delivered at
    the report (the user pays its price, the provider is paid), and the user reads the output."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c, got = run_to_report(market, "echo out-of-$MARKETSCHED_CONTRACT")
    assert got["state"] == "delivered" and got["exit_code"] == 0, got["note"]
    assert "as its provider's agent reported" in got["note"]
    assert money(ex, c) == (-c["user_price"], c["provider_price"])
    ex.store.check_books()
    out = Client(srv.url, tokens["u"]).get(f"/api/contracts/{c['id']}/output")
    text = base64.b64decode(out["output"])
    assert text == f"out-of-{c['id']}\n".encode() and out["digest"] == hashlib.sha256(text).hexdigest()
    assert out["end"] == "exit" and out["code"] == 0 and not out["truncated"]


def test_an_agent_killed_mid_contract_makes_its_provider_pay(market):
    """The agent reports the start, then is killed with kill -9: at the window's end nothing is
    settled (the report may still come); at the window's end + the grace the contract fails: the
    user pays nothing and gets the penalty from the provider."""
    ex, clock, srv, tokens, data, agents, tmp = market
    stop = tmp / "stop"
    c = contract_for(ex, clock, f"while [ ! -e {stop} ]; do sleep 0.05; done")
    agent = start_agent(srv, tokens[c["provider"]], data, tmp / "agent", agents)
    try:
        wait_for(lambda: run_row(ex, c["id"], "started_t") is not None, "the agent's start report")
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=HANG)
        clock.set(c["end_t"])
        ex.execute()
        assert ex.store.contract(c["id"])["state"] == "running"  # within the grace
        clock.set(c["end_t"] + REPORT_GRACE)
        ex.execute()
    finally:
        stop.touch()  # the orphaned job ends
    got = ex.store.contract(c["id"])
    assert got["state"] == "failed" and "did not report" in got["note"], got["note"]
    assert money(ex, c) == (c["penalty"], -c["penalty"]) and c["penalty"] > 0
    ex.store.check_books()


def test_an_agent_claiming_the_users_job_failed_does_not_make_the_user_pay(market):
    """The job exits with status 3 and the agent says so: the exchange cannot check whose fault
    that is, so the provider pays the penalty and the user pays nothing."""
    ex = market[0]
    c, got = run_to_report(market, "echo partial; exit 3")
    assert got["state"] == "failed" and got["exit_code"] == 3 and "cannot blame the user's job" in got["note"]
    assert money(ex, c) == (c["penalty"], -c["penalty"])
    ex.store.check_books()


def test_hostile_reports_are_refused_and_named(market):
    """Another provider's contract, a contract not due, a replayed report, a digest that does not
    match, a late report and a user's token are all refused, each naming why; no money moves."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c = contract_for(ex, clock, "true")
    ex.submit_request("u", 5.0, 1, 8, 20, 20, "true")  # a later window: not due
    ex.clear()
    (later,) = [x for x in ex.store.contracts() if x["state"] == "pending"]
    own, other = Client(srv.url, tokens[c["provider"]]), Client(srv.url, tokens["p2" if c["provider"] == "p1" else "p1"])
    data_ok = b"ok\n"
    body = {"end": "exit", "code": 0, "digest": hashlib.sha256(data_ok).hexdigest(),
            "output": base64.b64encode(data_ok).decode(), "output_bytes": len(data_ok)}

    def refused(client, path, payload, status, words):
        with pytest.raises(ClientError) as err:
            client.post(path, payload)
        assert err.value.status == status and words in err.value.message, err.value.message

    refused(other, f"/api/provider/runs/{c['id']}/ended", body, 404, f"no contract {c['id']} of yours")
    refused(own, f"/api/provider/runs/{later['id']}/ended", body, 409, "is not due")
    refused(own, f"/api/provider/runs/{c['id']}/ended", {**body, "digest": "0" * 64}, 400, "not the SHA-256")
    refused(Client(srv.url, tokens["u"]), f"/api/provider/runs/{c['id']}/ended", body, 403, "only providers")
    assert own.post(f"/api/provider/runs/{c['id']}/ended", body)["delivers"] is True
    refused(own, f"/api/provider/runs/{c['id']}/ended", body, 409, "reported already")
    assert money(ex, c) == (0, 0)  # a report moves nothing by itself
    # a late report: the later contract's window passed and its grace with it
    clock.set(later["start_t"])
    ex.execute()
    clock.set(later["end_t"] + REPORT_GRACE)
    refused(own, f"/api/provider/runs/{later['id']}/ended", body, 409, "is late")
    ex.execute()
    assert ex.store.contract(c["id"])["state"] == "delivered"
    assert ex.store.contract(later["id"])["state"] == "failed"
    ex.store.check_books()


def test_a_job_still_running_at_its_windows_end_is_stopped_by_the_agent_and_delivered(market):
    """The agent is given the run one second before the window's end: it stops the job then and
    reports ``window`` with the output so far; the user pays for the window it bought."""
    ex, clock, srv, tokens, data, agents, tmp = market
    stop = tmp / "stop"
    c = contract_for(ex, clock, f"echo begun; while [ ! -e {stop} ]; do sleep 0.05; done")
    clock.set(c["end_t"] - 1.0)
    try:
        start_agent(srv, tokens[c["provider"]], data, tmp / "agent", agents)
        wait_for(lambda: run_row(ex, c["id"], "reported_t") is not None, "the agent's report")
    finally:
        stop.touch()
    ex.execute()
    got = ex.store.contract(c["id"])
    assert got["state"] == "delivered" and got["note"].startswith("served its whole window"), got["note"]
    assert run_row(ex, c["id"], "end") == "window" and run_row(ex, c["id"], "output") == b"begun\n"
    assert money(ex, c) == (-c["user_price"], c["provider_price"])
    ex.store.check_books()
