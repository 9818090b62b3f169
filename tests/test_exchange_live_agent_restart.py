"""A provider's agent killed (kill -9) mid-run and started again re-adopts its runs
(:meth:`marketsched.exchange.agent_jobs.RunKeeper.recover`): a job still running is watched again and
reported when it ends, a job that ended while the agent was down is reported from what it left on disk
(``window`` if it ended after its window's end); either is delivered and paid by the trust rule, books exact. Attacks: a forged run folder and another
provider's run folder in the agent's folder are never reported as its result. Real agent processes
(``marketsched exchange provider run``), real jobs, the exchange on an injected clock."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path

from exchange_helpers import start_agent
from marketsched.exchange.agent_runs import REPORT_GRACE
from marketsched.live.cli import Client
from test_exchange_live_agent_runs import HANG, contract_for, market, money, run_row, wait_for

__all__ = ["market"]  # the fixture, shared with the agent runs' tests


def agent(srv, token, data: Path, work: Path, agents: list, log: Path) -> subprocess.Popen:
    """``exchange provider run`` on ``work``, its messages appended to ``log``."""
    return start_agent(srv, token, data, work, agents, log)


def started_then_killed(market, job: str) -> tuple[dict, Path, Path]:
    """A contract running ``job`` (which waits for the file ``stop``, then runs ``job``'s tail) whose
    agent reported its start and was then killed with kill -9; the contract, ``stop`` and the log."""
    ex, clock, srv, tokens, data, agents, tmp = market
    stop, log = tmp / "stop", tmp / "agent.log"
    c = contract_for(ex, clock, job.format(wait=f"while [ ! -e {stop} ]; do sleep 0.05; done"))
    first = agent(srv, tokens[c["provider"]], data, tmp / "agent", agents, log)
    try:
        wait_for(lambda: run_row(ex, c["id"], "started_t") is not None, "the agent's start report")
    except BaseException:
        stop.touch()  # the orphaned job ends
        raise
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=HANG)
    return c, stop, log


HOUR = 3600.0


def ended_at(tmp: Path, c: dict, shift: float) -> None:
    """Wait for contract ``c``'s job to end, then date its end ``shift`` seconds from now on the
    agent's machine (the modification time of the exit status its wrapper wrote). The exchange's
    clock is injected and jumps; the agent's machine's clock cannot, so the test places the job's
    end on it: an hour before now is before its window's end, an hour after is after it."""
    path = tmp / "agent" / "runs" / f"job-{c['id']}" / "exit_code"
    wait_for(path.exists, "the job's end")
    at = path.stat().st_mtime + shift
    os.utime(path, (at, at))


def output(srv, token, cid: int) -> bytes:
    return base64.b64decode(Client(srv.url, token).get(f"/api/contracts/{cid}/output")["output"])


def delivered_and_paid(ex, c: dict) -> None:
    ex.execute()
    got = ex.store.contract(c["id"])
    assert got["state"] == "delivered" and got["exit_code"] == 0, got["note"]
    assert money(ex, c) == (-c["user_price"], c["provider_price"])
    ex.store.check_books()


def test_an_agent_killed_mid_run_and_restarted_re_adopts_the_running_job_and_is_paid(market):
    """The agent starts the job and is killed with kill -9; the job runs on. A new agent on the same
    folder re-adopts it (its record matches the run the exchange published), reports its end when it
    exits, and the contract is delivered: the user pays its price, the provider is paid."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c, stop, log = started_then_killed(market, "echo begun; {wait}; echo done-$MARKETSCHED_CONTRACT")
    try:
        agent(srv, tokens[c["provider"]], data, tmp / "agent", agents, log)
        wait_for(lambda: f"contract {c['id']}: re-adopted its running job" in log.read_text(), "the re-adoption")
        assert run_row(ex, c["id"], "reported_t") is None  # still running
    finally:
        stop.touch()
    wait_for(lambda: run_row(ex, c["id"], "reported_t") is not None, "the restarted agent's report")
    assert (run_row(ex, c["id"], "end"), run_row(ex, c["id"], "code")) == ("exit", 0)
    delivered_and_paid(ex, c)
    assert output(srv, tokens["u"], c["id"]) == f"begun\ndone-{c['id']}\n".encode()
    assert not list((tmp / "agent" / "records").iterdir())  # the record goes with the report


def test_a_job_that_ended_while_its_agent_was_down_is_delivered_when_the_agent_restarts(market):
    """The agent is killed; the job ends (exit 0) while no agent runs; the agent started again before
    the report deadline (the window's end passed meanwhile) reports it from the folder and is paid."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c, stop, log = started_then_killed(market, "{wait}; echo finished")
    stop.touch()
    ended_at(tmp, c, -HOUR)  # in its window
    clock.set(c["end_t"] + REPORT_GRACE / 2)
    ex.execute()
    assert ex.store.contract(c["id"])["state"] == "running"  # no report yet, the deadline not reached
    agent(srv, tokens[c["provider"]], data, tmp / "agent", agents, log)
    wait_for(lambda: run_row(ex, c["id"], "reported_t") is not None, "the restarted agent's report")
    assert (run_row(ex, c["id"], "end"), run_row(ex, c["id"], "code")) == ("exit", 0)
    assert run_row(ex, c["id"], "cpu_seconds") is None  # not measured: the agent was down
    delivered_and_paid(ex, c)
    assert output(srv, tokens["u"], c["id"]) == b"finished\n"


def test_a_job_that_failed_after_its_windows_end_while_its_agent_was_down_is_reported_window(market):
    """The agent is killed; the window ends; the job then exits 1 while no agent runs. Had the agent
    been up it would have stopped the job at the window's end and reported ``window``: the agent
    started again reports ``window`` (the job's end, as its machine recorded it, is after the
    window's end), and the contract is delivered and paid, never the provider's penalty for its
    agent's downtime."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c, stop, log = started_then_killed(market, "{wait}; echo failed-late; exit 1")
    clock.set(c["end_t"] + REPORT_GRACE / 2)
    stop.touch()
    ended_at(tmp, c, HOUR)  # after its window's end
    agent(srv, tokens[c["provider"]], data, tmp / "agent", agents, log)
    wait_for(lambda: run_row(ex, c["id"], "reported_t") is not None, "the restarted agent's report")
    assert (run_row(ex, c["id"], "end"), run_row(ex, c["id"], "code")) == ("window", None)
    assert f"contract {c['id']}: its job ended while the agent was down, after its window's end" in log.read_text()
    ex.execute()
    got = ex.store.contract(c["id"])
    assert got["state"] == "delivered", got["note"]
    assert money(ex, c) == (-c["user_price"], c["provider_price"])
    ex.store.check_books()
    assert output(srv, tokens["u"], c["id"]) == b"failed-late\n"


def test_forged_and_other_providers_run_folders_are_never_reported_as_the_agents_result(market):
    """Attack. Two contracts, one per provider. Into p1's agent folder go, before its agent starts:
    a forged finished folder for its own contract (exit 0, forged output, a record of another run),
    and a copy of p2's contract's folder with a record naming p1. p1's agent moves the forged folder
    aside and runs its job itself (the output is the job's, not the forgery); it never reports p2's
    contract, which fails at its deadline (its own agent never ran), and drops the planted record."""
    ex, clock, srv, tokens, data, agents, tmp = market
    for _ in range(2):  # two CPU units each: one contract per provider
        ex.submit_request("u", 5.0, 2, 8, 2, 2, "echo real-$MARKETSCHED_CONTRACT")
    ex.clear()
    cs = {c["provider"]: c for c in ex.store.contracts() if c["state"] == "pending"}
    assert set(cs) == {"p1", "p2"}
    clock.set(cs["p1"]["start_t"])
    ex.execute()
    own, other = cs["p1"]["id"], cs["p2"]["id"]
    work = tmp / "agent"
    for cid in (own, other):
        folder = work / "runs" / f"job-{cid}"
        folder.mkdir(parents=True)
        (folder / "exit_code").write_text("0\n")
        (folder / "stdout").write_text("forged\n")
    (work / "records").mkdir(mode=0o700)
    (work / "records" / f"run-{own}.json").write_text(json.dumps({"provider": "p1", "contract": own, "deadline": 1.0,
                                                                 "spec": "0" * 64}))
    deadline = run_row(ex, other, "deadline_t")
    (work / "records" / f"run-{other}.json").write_text(json.dumps({"provider": "p1", "contract": other,
                                                                   "deadline": deadline, "spec": "0" * 64}))
    agent(srv, tokens["p1"], data, work, agents, tmp / "agent.log")
    wait_for(lambda: run_row(ex, own, "reported_t") is not None, "p1's report")
    assert not (work / "records" / f"run-{other}.json").exists()
    ex.execute()
    got = ex.store.contract(own)
    assert got["state"] == "delivered", got["note"]
    assert output(srv, tokens["u"], own) == f"real-{own}\n".encode()
    assert list((work / "runs").glob(f"stale-job-{own}-*"))  # the forgery, moved aside and kept
    assert run_row(ex, other, "reported_t") is None
    clock.set(cs["p2"]["end_t"] + REPORT_GRACE)
    ex.execute()
    assert ex.store.contract(other)["state"] == "failed"
    ex.store.check_books()


def test_a_run_reported_started_without_this_agents_record_is_not_adopted(market):
    """Attack: the run was reported started (with the provider's token) but the folder the agent finds
    holds a finished job with no record of the agent's: it is not reported; the run fails at its
    deadline (the provider pays the penalty), never delivered on a folder's say-so."""
    ex, clock, srv, tokens, data, agents, tmp = market
    c = contract_for(ex, clock, "echo real")
    Client(srv.url, tokens[c["provider"]]).post(f"/api/provider/runs/{c['id']}/started", {})
    folder = tmp / "agent" / "runs" / f"job-{c['id']}"
    folder.mkdir(parents=True)
    (folder / "exit_code").write_text("0\n")
    (folder / "stdout").write_text("forged\n")
    (tmp / "agent" / "records").mkdir(mode=0o700)
    log = tmp / "agent.log"
    agent(srv, tokens[c["provider"]], data, tmp / "agent", agents, log)
    wait_for(lambda: "not adopted" in log.read_text(), "the agent's look at the folder")
    assert run_row(ex, c["id"], "reported_t") is None
    clock.set(c["end_t"] + REPORT_GRACE)
    ex.execute()
    got = ex.store.contract(c["id"])
    assert got["state"] == "failed" and "did not report" in got["note"], got["note"]
    assert money(ex, c) == (c["penalty"], -c["penalty"])
    ex.store.check_books()
