"""Bidding and offer agents in simulation (fake clock, fake backends): a compressed day."""

from __future__ import annotations

import numpy as np
import pytest

from exchange_helpers import make_exchange
from marketsched.exchange.agents import BiddingAgent, JobNeed, OfferAgent, simulate
from marketsched.exchange.replay import contract_terms
from marketsched.exchange.store import MICRO


def _day(path, shade=1.0):
    ex, clock, machines = make_exchange(path, mechanism="critical-value", slot_seconds=10, period_seconds=10)
    rng = np.random.default_rng(4)
    providers = []
    for p in ("p1", "p2"):
        ex.join(p)
        costs = {}
        for n in range(2):
            ex.add_node(p, f"n{n}", 4, 100)
            costs[f"n{n}"] = float(rng.integers(3, 8))
        providers.append(OfferAgent(p, costs, markup=1.2, horizon=12, renew=3))
    users = []
    for u in range(4):
        jobs = []
        for _ in range(6):
            release = int(rng.integers(2, 60))
            duration = int(rng.integers(1, 4))
            jobs.append(JobNeed(float(rng.integers(6, 16)), int(rng.integers(1, 4)), 10, duration, release,
                                release + duration - 1 + int(rng.integers(0, 8))))
        users.append(BiddingAgent(f"u{u}", jobs, shade=shade))
    simulate(ex, providers + users, until=800, step=10)
    return ex, users, providers


def test_a_day_of_agents(tmp_path):
    ex, users, _ = _day(tmp_path / "a.db")
    contracts = ex.store.contracts()
    assert len(contracts) > 10
    orders = {o["id"]: o for o in ex.store.orders()}
    resubmitted = 0
    for agent in users:
        for i, job in enumerate(agent.jobs):
            rids = agent.requests.get(i, [])
            resubmitted += len(rids) > 1
            for rid in rids:  # truthful reports, windows inside the job's [release, deadline]
                o = orders[rid]
                assert o["value"] == job.value and o["cpu"] == job.cpu
                assert job.release <= o["first_slot"] and o["last_slot"] <= job.deadline
                assert o["last_slot"] - o["first_slot"] + 1 == job.duration
            filled = [rid for rid in rids if orders[rid]["state"] == "filled"]
            assert len(filled) <= 1 and (not filled or i not in agent.given_up)
            paid = sum(c["user_price"] for c in contracts if c["request_id"] in rids)
            assert paid <= round(job.value * job.cpu * job.duration * MICRO)  # individually rational
    assert resubmitted > 0  # some job lost a period and asked again for a later window
    for node_id in ex.store.nodes():  # each node offered without gaps or overlaps
        offers = sorted((o["first_slot"], o["last_slot"]) for o in orders.values()
                        if o["side"] == "offer" and o["node_id"] == node_id)
        assert all(b[0] == a[1] + 1 for a, b in zip(offers, offers[1:]))
    assert not ex.open_contracts()
    ex.store.check_books()


def test_agents_are_deterministic(tmp_path):
    a, _, _ = _day(tmp_path / "a.db")
    b, _, _ = _day(tmp_path / "b.db")
    assert contract_terms(a.store) == contract_terms(b.store)


def test_a_shading_agent_reports_its_share(tmp_path):
    ex, users, _ = _day(tmp_path / "a.db", shade=0.8)
    orders = {o["id"]: o for o in ex.store.orders("request")}
    for agent in users:
        for i, rids in agent.requests.items():
            assert all(orders[r]["value"] == pytest.approx(0.8 * agent.jobs[i].value) for r in rids)


def test_bad_agent_fields_are_named():
    with pytest.raises(ValueError, match="'deadline'"):
        JobNeed(10, 1, 1, 3, 5, 6)
    with pytest.raises(ValueError, match="'shade'"):
        BiddingAgent("u", [], shade=1.5)
    with pytest.raises(ValueError, match="horizon > renew"):
        OfferAgent("p", {}, horizon=3, renew=3)
