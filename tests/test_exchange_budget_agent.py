"""The bidding agent with a budget that bids from market information: its budget holds on any
price path (hypothesis, on an exchange with a fake clock), it is deterministic, its bids track
a rising and a falling price, and it runs unchanged over the HTTP API."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exchange_helpers import make_exchange
from marketsched.cli import main
from marketsched.exchange.access import PAYING_CONTRACT_STATES, ApiAccess, LocalAccess
from marketsched.exchange.agents import BudgetAgent, JobNeed, agents_from_config
from marketsched.exchange.api import ExchangeServer, ExchangeService, issue_token
from marketsched.exchange.replay import contract_terms
from marketsched.exchange.store import MICRO, ExchangeStore, to_micro, user_account
from marketsched.live.cli import Client


def _jobs(rng, n, horizon=40):
    jobs = []
    for _ in range(n):
        release = int(rng.integers(2, horizon))
        duration = int(rng.integers(1, 4))
        jobs.append(JobNeed(float(rng.integers(2, 16)), int(rng.integers(1, 4)), 10, duration, release,
                            release + duration - 1 + int(rng.integers(0, 6))))
    return jobs


def _market(path, prices, mechanism, seed, budget):
    """An exchange on a fake clock, slots and periods of 10 s: provider p1 offers node n0 (8
    CPUs) one slot at a time, 8 slots ahead, at reserve ``prices[t]``; a rival user bids around the same path;
    agent 'a' (budget ``budget``) has random jobs. Returns the exchange, the agent and the
    most the agent ever had committed (micro-units, checked after every step)."""
    ex, clock, _ = make_exchange(path, mechanism=mechanism, slot_seconds=10, period_seconds=10, seed=seed)
    rng = np.random.default_rng(seed)
    ex.join("p1")
    ex.add_node("p1", "n0", 8, 100)
    agent = BudgetAgent("a", _jobs(rng, 8), budget=budget, margin=0.2, window=3)
    access = LocalAccess(ex, "a")
    most = 0
    for t, price in enumerate(prices):
        now = ex.slot()
        if t == 0:
            ex.submit_offer("p1", "n0", price, now + 1, now + 7)
        ex.submit_offer("p1", "n0", price, now + 8, now + 8)
        ex.submit_request("rival", round(price * float(rng.uniform(0.8, 1.6)), 6), int(rng.integers(1, 5)), 0,
                          now + 2, now + 2, "true")
        agent.act(ex)
        most = max(most, agent.committed(access))
        ex.tick()
        clock.advance(10)
        most = max(most, agent.committed(access))
    for _ in range(8):  # the last windows pass: every contract is settled
        ex.tick()
        clock.advance(10)
    ex.tick()
    return ex, agent, most


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prices=st.lists(st.floats(0.1, 12.0), min_size=5, max_size=40),
       mechanism=st.sampled_from(["pay-as-bid", "k-pricing", "critical-value"]),
       budget=st.floats(0.0, 150.0), seed=st.integers(0, 2**16))
def test_the_budget_is_never_exceeded(tmp_path_factory, prices, mechanism, budget, seed):
    ex, agent, most = _market(tmp_path_factory.mktemp("b") / "x.db", prices, mechanism, seed, budget)
    assert most <= to_micro(budget)
    assert not ex.open_contracts()
    paid = -ex.store.balances().get(user_account("a"), 0)  # the agent's account: price paid less penalties received
    delivered = sum(c["user_price"] for c in ex.store.contracts(("delivered",)) if c["user"] == "a")
    assert delivered <= to_micro(budget) and paid <= delivered
    orders = {o["id"]: o for o in ex.store.orders("request")}
    for i, rids in agent.requests.items():  # every bid at most the job's value, windows inside the job's
        job = agent.jobs[i]
        for rid in rids:
            assert orders[rid]["value"] <= job.value
            assert job.release <= orders[rid]["first_slot"] and orders[rid]["last_slot"] <= job.deadline
    ex.store.check_books()


def test_a_budget_binds_and_the_agent_waits(tmp_path):
    """A budget smaller than the jobs' worth: the agent commits up to it and no more, and spends
    nearly all of it over the run as lost requests free their commitment."""
    prices = [2.0] * 30
    ex, agent, most = _market(tmp_path / "x.db", prices, "pay-as-bid", 3, budget=12.0)
    assert 0 < most <= to_micro(12.0)
    paid = sum(c["user_price"] for c in ex.store.contracts(("delivered",)) if c["user"] == "a")
    assert 0 < paid <= to_micro(12.0)
    worth = sum(j.value * j.cpu * j.duration for j in agent.jobs)
    assert worth > 12.0  # the budget, not the values, was the limit


def test_the_agent_is_deterministic(tmp_path):
    prices = list(np.random.default_rng(7).uniform(0.5, 8, 30))
    a, agent_a, _ = _market(tmp_path / "a.db", prices, "k-pricing", 5, 60.0)
    b, agent_b, _ = _market(tmp_path / "b.db", prices, "k-pricing", 5, 60.0)
    assert agent_a.bids == agent_b.bids and agent_a.bids
    assert contract_terms(a.store) == contract_terms(b.store)


class ScriptedMarket:
    """Market information given by the test: one period per step with class-1 price ``price``;
    the agent's requests expire at the next step (no trade of its own)."""

    def __init__(self):
        self.now, self.rows, self.orders = 0, [], []

    def step(self, price):
        self.now += 1
        self.rows.append({"period": len(self.rows) + 1, "price": price, "classes": {1: {"price": price}}})
        for o in self.orders:
            o["state"] = "expired"

    def slot(self):
        return self.now

    def history(self, limit):
        return self.rows[-limit:]

    def requests(self):
        return self.orders

    def paying_contracts(self):
        return []

    def submit_request(self, value, cpu, mem, first_slot, last_slot, command):
        self.orders.append({"id": len(self.orders) + 1, "value": value, "cpu": cpu, "first_slot": first_slot,
                            "last_slot": last_slot, "state": "open"})
        return len(self.orders)


@pytest.mark.parametrize("path", [np.linspace(1.0, 8.0, 15), np.linspace(8.0, 1.0, 15)], ids=["rising", "falling"])
def test_bids_track_the_price(path):
    market = ScriptedMarket()
    agent = BudgetAgent("a", [], budget=1000.0, margin=0.1, window=2, lead=1)
    for price in path:  # one new job of one slot per step, bid once (its only window)
        market.step(float(price))
        agent.jobs.append(JobNeed(10.0, 1, 0, 1, market.now + 1, market.now + 1))
        agent.act(market)
    assert [job for _, job, _, _ in agent.bids] == list(range(len(path)))
    bids = [bid for _, _, bid, _ in agent.bids]
    rising = path[-1] > path[0]
    assert all((b > a) if rising else (b < a) for a, b in zip(bids, bids[1:]) if max(a, b) < 10.0)
    for slot, _, bid, ref in agent.bids:  # the rule: the mean of the last two prices, plus 10%, under the value
        recent = [r["price"] for r in market.rows[:slot]][-2:]
        assert ref == pytest.approx(sum(recent) / len(recent))
        assert bid == pytest.approx(min(10.0, 1.1 * ref), abs=1e-6) and bid <= 10.0


def test_a_losing_job_bids_higher_each_time():
    market = ScriptedMarket()
    agent = BudgetAgent("a", [JobNeed(10.0, 1, 0, 1, 2, 40)], budget=1000.0, margin=0.1, window=1, lead=1)
    for _ in range(8):
        market.step(2.0)
        agent.act(market)
    bids = [bid for _, _, bid, _ in agent.bids]
    assert bids == pytest.approx([2.0 * (1 + 0.1 * n) for n in range(1, 9)])


def test_no_information_bids_the_value_within_the_budget():
    market = ScriptedMarket()
    agent = BudgetAgent("a", [JobNeed(10.0, 2, 0, 3, 1, 9), JobNeed(10.0, 1, 0, 1, 1, 9)], budget=30.0, lead=1)
    agent.act(market)
    assert [o["value"] for o in market.orders] == [5.0]  # 30 over 2 CPUs x 3 slots; nothing left for the second


@pytest.mark.live  # the live market's HTTP server
def test_the_same_agent_over_the_api(tmp_path):
    """The agent reaches a served exchange with its user's token: it sees the market
    information and its own commitments as in process, and its budget holds."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="pay-as-bid", slot_seconds=10, period_seconds=10)
    ex.join("p1")
    ex.add_node("p1", "n0", 8, 100)
    ex.submit_offer("p1", "n0", 1.0, 1, 200)
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        api = ApiAccess(Client(srv.url, issue_token(ex.store, "user", "a", 0.0)))
        local = LocalAccess(ex, "a")
        rng = np.random.default_rng(2)
        agent = BudgetAgent("a", [JobNeed(j.value, j.cpu, j.mem, j.duration, j.release + 6, j.deadline + 6) for j in _jobs(rng, 6, 20)], budget=40.0, margin=0.2, window=3)
        for t in range(40):
            ex.submit_request("rival", 2.0 + 0.1 * t, 2, 0, ex.slot() + 2, ex.slot() + 2, "true")
            if t >= 5:  # the agent starts once the market has prices
                agent.act(api)
            assert api.history(3) == local.history(3)
            assert api.slot() == local.slot()
            assert agent.committed(api) == agent.committed(local) <= to_micro(40.0)
            ex.tick()
            clock.advance(10)
        assert agent.bids and any(ref is not None for *_, ref in agent.bids)
        assert [o["id"] for o in api.requests()] == [o["id"] for o in local.requests()]
        mine = [c for c in ex.store.contracts(PAYING_CONTRACT_STATES) if c["user"] == "a"]
        assert mine and sum(c["user_price"] for c in mine) <= 40.0 * MICRO
    finally:
        srv.shutdown()
        service.store.close()


def test_budget_agents_from_a_config_and_bad_fields():
    agents = agents_from_config({"users": [{"user": "a", "budget": 50, "margin": 0.2, "window": 4, "jobs": [
        {"value": 9, "cpu": 2, "duration": 2, "release": 3, "deadline": 8}]}]}, now_slot=100)
    assert isinstance(agents[0], BudgetAgent) and agents[0].budget == 50 and agents[0].jobs[0].release == 103
    with pytest.raises(ValueError, match="'budget'"):
        BudgetAgent("a", [], budget=-1)
    with pytest.raises(ValueError, match="'margin'"):
        BudgetAgent("a", [], budget=1, margin=float("nan"))
    with pytest.raises(ValueError, match="'window'"):
        BudgetAgent("a", [], budget=1, window=0)


@pytest.mark.live  # the live market's HTTP server
def test_the_bid_command_runs_the_agent_over_the_api(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="pay-as-bid", slot_seconds=10, period_seconds=10)
    ex.join("p1")
    ex.add_node("p1", "n0", 8, 100)
    ex.submit_offer("p1", "n0", 1.0, 1, 200)
    ex.submit_request("rival", 3.0, 2, 0, 1, 1, "true")
    ex.tick()  # a clearing at price 3 for CPU class 2
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    srv = ExchangeServer(service, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        config = tmp_path / "me.json"
        config.write_text(json.dumps({"budget": 20, "margin": 0.5, "jobs": [
            {"value": 9, "cpu": 2, "duration": 2, "release": 3, "deadline": 8, "command": "echo hi"},
            {"value": 9, "cpu": 2, "duration": 2, "release": 3, "deadline": 8}]}))
        token = issue_token(ex.store, "user", "alice", 0.0)
        got = CliRunner().invoke(main, ["exchange", "bid", str(config), "--url", srv.url, "--token", token,
                                        "--for", "0", "--data", str(srv.identity_dir)])
        assert got.exit_code == 0, got.output
        assert "2 bids for 'alice'; committed 20.000000 of a budget of 20" in got.output
        a, b = [o for o in ex.store.orders("request") if o["owner"] == "alice"]
        assert (a["value"], a["cpu"], a["first_slot"], a["command"]) == (4.5, 2, 3, "echo hi")  # 3 x (1 + 0.5)
        assert (b["value"], b["command"]) == (0.5, "true")  # what is left of the budget: 2 over 4 CPU slots
        p1 = issue_token(ex.store, "provider", "p1", 0.0)
        got = CliRunner().invoke(main, ["exchange", "bid", str(config), "--url", srv.url, "--token", p1,
                                        "--data", str(srv.identity_dir)])
        # a provider's token runs the provider's offer agent, which a user's config does not describe
        assert got.exit_code != 0 and "a provider's agent needs a JSON object with 'costs'" in got.output
    finally:
        srv.shutdown()
        service.store.close()
