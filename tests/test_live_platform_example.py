"""A new live market on the platform's public pieces, end to end (docs/architecture.md).

The market: "lowest bid first" (the mechanism of the plugin tutorial, tests/test_plugin.py), one
slot, non-preemptive, each job paying its bid per second of running time when it ends. What it
writes itself is what docs/architecture.md lists: the mechanism object, its bid language and
validation, its decision trigger, what it records, who pays on failure, its page. Everything
else (server and limits, callers' identity, request parsing, ledger, executor, clock, page
scaffold) is the platform's. The test runs it for real: an HTTP server on a free port, a
SQLite ledger, a job run by the local executor, its payment posted, the books balanced.
"""

from __future__ import annotations

import heapq
import http.client
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi import FastAPI

from marketsched.platform import validation
from marketsched.platform.client import Client, ClientError
from marketsched.platform.clock import FakeClock
from marketsched.platform.engine import LiveEngine
from marketsched.platform.executor import LocalExecutor
from marketsched.platform.files import data_folder
from marketsched.platform.http import (
    NUM,
    STR,
    Gate,
    Route,
    authenticate_caller,
    json_errors,
    page_endpoint,
    route_endpoint,
)
from marketsched.platform.ledger import DEPOSITS, REVENUE, Store, user_account
from marketsched.platform.server import Server
from marketsched.platform.tokens import hash_token
from marketsched.platform.validation import MarketError
from marketsched.platform.web import csp, page


class LowestBidFirst:  # the mechanism object: serial jobs, lowest bid first, pay as bid per second run
    def bind(self, sim):
        self.sim, self.bid, self.queue, self.since = sim, [], [], {}

    def add_jobs(self, bids, keys, costs):
        for b in bids:
            heapq.heappush(self.queue, (b, len(self.bid)))
            self.bid.append(b)

    def withdraw(self, j):
        return False  # this market has no cancel

    def step(self, t, arrived, completed):
        for j in completed:
            self.sim.charge(j, self.bid[j] * (t - self.since.pop(j)))
        while self.sim.free and self.queue:
            j = heapq.heappop(self.queue)[1]
            self.sim.start(j)
            self.since[j] = t


PAGE = page("lowest bid first", "", "<main id='jobs'></main>\n", "$('jobs').textContent = 'lowest bid first';\n")


class LowestBidMarket:
    """Bid language: ``{"bid": per second, "command": text}``. Trigger: a submission, an exit.
    Recorded: the job's row and state, its charge. Faults: a job that fails pays for what it ran."""

    def __init__(self, data, clock):
        self.data, self.clock, self.lock = data_folder(data), clock, threading.Lock()
        self.store = Store(self.data)
        self.executor = LocalExecutor(self.data / "jobs", containment="none")
        self.engine, self.job_of = LiveEngine(LowestBidFirst(), 1, clock), {}

    def add_user(self, name, token, deposit):
        self.store.add_user(name, hash_token(token), False, self.clock())
        self.store.post(self.clock(), "deposit", DEPOSITS, user_account(name), validation.amount(deposit, "deposit"))

    def authenticate(self, token):
        with self.lock:
            found = self.store.user_by_token_hash(hash_token(token or ""))
        if found is None:
            raise MarketError("wrong token: no user has this token", 401)
        return found[0], False

    def submit(self, who, bid, command):
        bid = validation.bid(bid)
        if not isinstance(command, str) or not validation.utf8(command, "command").strip():
            raise MarketError("command must be a non-empty shell command line")
        with self.lock:
            job = self.store.insert_job(who[0], bid, 1, None, command, self.clock())
            self.job_of[self.engine.submit_job(bid, bid, 0.0)] = (job, who[0], command)
            self._carry_out()
            return {"id": job}

    def reap(self):  # the other trigger: processes that ended
        with self.lock:
            done = {key: code for key, code in self.executor.exits()}
            rows = [r for r, (job, _, _) in self.job_of.items() if job in done]
            if rows:
                self.engine.complete(*rows)
                for r in rows:
                    job, owner, _ = self.job_of[r]
                    paid = validation.to_micro(self.engine.payment[r])
                    self.store.post(self.clock(), "charge", user_account(owner), REVENUE, paid, job)
                    self.store.update_job(job, state="completed" if done[job] == 0 else "failed",
                                          exit_code=done[job], charged=paid)
                self._carry_out()
            return len(rows)

    def _carry_out(self):  # the mechanism's decisions become processes
        for kind, row, _ in self.engine.drain():
            job, _, command = self.job_of[row]
            if kind == "start":
                self.store.update_job(job, state="running")
                self.executor.launch(job, command)


ROUTES = [Route("POST", "/api/jobs", lambda m, who, q, body: m.submit(who, body.get("bid"), body.get("command")),
                "submit a job", body={"bid": NUM, "command": STR}, noun="a job")]


class LowestBidServer(Server):
    def build_app(self):
        app, gate = FastAPI(), Gate()
        pool = app.state.pool = ThreadPoolExecutor(2)
        app.add_api_route("/", page_endpoint(PAGE, csp(PAGE)), methods=["GET"])
        for r in ROUTES:
            app.add_api_route(r.path, route_endpoint(self.broker, r, gate, pool, authenticate_caller), methods=[r.method])
        json_errors(app)
        return app


# ---------------------------------------------------------------------------- the test
@pytest.fixture
def market(tmp_path):
    m = LowestBidMarket(tmp_path / "lbf", FakeClock(100.0))
    server = LowestBidServer(m, "127.0.0.1", 0)
    server.serve_in_thread()
    yield m, server
    server.shutdown()
    m.executor.shutdown(kill=True)
    m.store.close()


def test_lowest_bid_market_runs_a_job_and_books_its_payment(market):
    m, server = market
    m.add_user("ann", "ann-token", 100.0)
    m.add_user("bob", "bob-token", 100.0)
    ann, bob = Client(server.url, "ann-token"), Client(server.url, "bob-token")
    with pytest.raises(ClientError, match="bid must be a finite positive number") as refused:
        ann.post("/api/jobs", {"bid": -1, "command": "true"})
    assert refused.value.status == 400
    with pytest.raises(ClientError, match="wrong token") as unknown:
        Client(server.url, "nobody").post("/api/jobs", {"bid": 1, "command": "true"})
    assert unknown.value.status == 401
    first = ann.post("/api/jobs", {"bid": 2.0, "command": "echo ran > out.txt"})["id"]  # starts: the slot is free
    second = bob.post("/api/jobs", {"bid": 0.5, "command": "exit 3"})["id"]  # waits for the slot
    assert m.store.job(first)["state"] == "running" and m.store.job(second)["state"] == "queued"
    m.clock.set(103.0)  # ann's job ran 3 market seconds when its exit is reaped
    for _ in range(600):  # the real process ends (at most a minute: a hang guard, no timing)
        m.executor.wait(0.1)
        if m.reap():
            break
    assert (m.executor.workdir(first) / "out.txt").read_text() == "ran\n"
    assert m.store.job(first)["state"] == "completed" and m.store.job(first)["charged"] == 6_000_000
    assert m.store.job(second)["state"] == "running"  # the decision that followed the exit
    m.clock.set(104.0)
    for _ in range(600):
        m.executor.wait(0.1)
        if m.reap():
            break
    assert m.store.job(second)["state"] == "failed" and m.store.job(second)["exit_code"] == 3
    assert m.store.job(second)["charged"] == 500_000  # a failed job pays for the second it ran
    assert m.store.check_books() == {"deposits": 200_000_000, "users": 193_500_000, "revenue": 6_500_000}
    assert m.store.balance(user_account("ann")) == 94_000_000
    home = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    home.request("GET", "/")
    resp = home.getresponse()
    assert resp.status == 200 and "lowest bid first" in resp.read().decode()
    assert "script-src 'sha256-" in resp.getheader("content-security-policy")
