"""The exchange's clearing is the library's (Stößer 2009, ch. 3-4): same allocation, and every
payment equal to the library's to the micro-unit; no node is ever oversold across periods."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exchange_helpers import make_exchange
from marketsched.exchange.book import EXACT_MAX_ORDERS, period_rng, split
from marketsched.exchange.store import MICRO, to_micro
from marketsched.mechanisms.clearing.exact import solve_exact
from marketsched.mechanisms.clearing.greedex import critical_value_pricing, greedy_allocation, k_pricing
from marketsched.mechanisms.clearing.orderbook import OrderBook
from marketsched.mechanisms.clearing.randomized import pay_as_bid, randomized_allocation

request_st = st.tuples(st.integers(1, 30), st.integers(1, 4), st.integers(0, 60), st.integers(1, 5),
                       st.integers(0, 3), st.sampled_from(["u1", "u2", "u3"]))
offer_st = st.tuples(st.integers(0, 20), st.integers(1, 8), st.integers(20, 200), st.integers(1, 4),
                     st.integers(0, 7))


def _session(tmp_path, mechanism, requests, offers, k=0.5):
    """One exchange, one clearing at t=0 (next slot 1); returns it and the test's own book."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism=mechanism, k=k, seed=7)
    jobs, nodes = [], []
    for p, (reserve, cpu, mem, first, length) in enumerate(offers):
        ex.join(f"p{p}")
        ex.add_node(f"p{p}", "n", cpu, mem)
        ex.submit_offer(f"p{p}", "n", reserve, first, first + length)
        nodes.append((reserve, cpu, mem, first - 1, first + length - 1))
    for value, cpu, mem, first, length, user in requests:
        ex.submit_request(user, value, cpu, mem, first, first + length, "true")
        jobs.append((value, cpu, mem, first - 1, first + length - 1))
    ex.clear()
    return ex, OrderBook.from_rows(jobs, nodes)


def _library(book, mechanism, k):
    if mechanism == "exact":
        alloc = solve_exact(book, mip_rel_gap=0.0).allocation
        return alloc, k_pricing(book, alloc, k)
    if mechanism == "pay-as-bid":
        alloc = randomized_allocation(book, 10.0, period_rng(7, 1))
        return alloc, pay_as_bid(book, alloc)
    alloc = greedy_allocation(book)
    return alloc, (critical_value_pricing(book, alloc) if mechanism == "critical-value" else k_pricing(book, alloc, k))


@pytest.mark.parametrize("mechanism", ["critical-value", "k-pricing", "pay-as-bid", "exact"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request_st, min_size=1, max_size=8), offers=st.lists(offer_st, min_size=1, max_size=3),
       k=st.sampled_from([0.0, 0.3, 1.0]))
def test_payments_equal_the_library_to_the_micro_unit(tmp_path_factory, mechanism, requests, offers, k):
    ex, book = _session(tmp_path_factory.mktemp("x"), mechanism, requests, offers, k)
    alloc, pay = _library(book, mechanism, k)
    contracts = ex.store.contracts()
    req_ids = [o["id"] for o in ex.store.orders("request")]
    paid = {rid: 0 for rid in req_ids}
    slots = {rid: 0 for rid in req_ids}
    for c in contracts:
        paid[c["request_id"]] += c["user_price"]
        slots[c["request_id"]] += c["last_slot"] - c["first_slot"] + 1
    for j, rid in enumerate(req_ids):
        assert (slots[rid] > 0) == bool(alloc.allocated[j])
        if alloc.allocated[j]:
            assert slots[rid] == book.job_duration[j]
        assert paid[rid] == to_micro(pay.job[j])
    received = {}
    for c in contracts:
        received[c["provider"]] = received.get(c["provider"], 0) + c["provider_price"]
    for n in range(book.n_nodes):
        assert received.get(f"p{n}", 0) == to_micro(pay.node[n])
    filled = {o["id"] for o in ex.store.orders("request", "filled")}
    assert filled == {rid for j, rid in enumerate(req_ids) if alloc.allocated[j]}


def test_worked_example_of_the_thesis(tmp_path):
    """Table 3.2 of Stößer (2009): critical-value payments 2940, 5112, 3960 for the winners."""
    jobs = [(10, 35, 50, 3, 7), (14, 35, 27, 1, 7), (11, 84, 45, 2, 7), (16, 71, 48, 2, 7), (12, 63, 30, 2, 7),
            (17, 55, 20, 2, 7)]
    ex, _, _ = make_exchange(tmp_path / "x.db")
    for i, (v, C, M, R, E) in enumerate([(8, 123, 98, 1, 8), (11, 98, 82, 1, 9)]):
        ex.join(f"p{i}")
        ex.add_node(f"p{i}", "n", C, M)
        ex.submit_offer(f"p{i}", "n", v, R, E)
    for i, (v, c, m, r, e) in enumerate(jobs):
        ex.submit_request(f"u{i}", v, c, m, r, e, "true")
    ex.clear()
    by_user = {}
    for c in ex.store.contracts():
        by_user[c["user"]] = by_user.get(c["user"], 0) + c["user_price"]
    assert by_user == {"u1": 2940 * MICRO, "u3": 5112 * MICRO, "u5": 3960 * MICRO}
    got = {}
    for c in ex.store.contracts():
        got[c["provider"]] = got.get(c["provider"], 0) + c["provider_price"]
    assert sum(got.values()) == sum(by_user.values())
    thesis = OrderBook.from_rows(jobs, [(8, 123, 98, 1, 8), (11, 98, 82, 1, 9)])  # unshifted slots
    pay = critical_value_pricing(thesis, greedy_allocation(thesis))
    assert got == {"p0": to_micro(pay.node[0]), "p1": to_micro(pay.node[1])}  # 6165.884116, 5846.115884


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(request_st, min_size=1, max_size=6), min_size=2, max_size=4),
       offers=st.lists(offer_st, min_size=1, max_size=3))
def test_no_node_is_oversold_across_periods(tmp_path_factory, rounds, offers):
    """Offers stay open across periods; capacity sold in one period is never sold again."""
    ex, clock, _ = make_exchange(tmp_path_factory.mktemp("x") / "x.db", slot_seconds=10, period_seconds=10)
    for p, (reserve, cpu, mem, first, length) in enumerate(offers):
        ex.join(f"p{p}")
        ex.add_node(f"p{p}", "n", cpu, mem)
        ex.submit_offer(f"p{p}", "n", reserve, first + 4, first + 4 + length)
    for i, batch in enumerate(rounds):
        for value, cpu, mem, first, length, user in batch:
            ex.submit_request(user, value, cpu, mem, first + i + 2, first + i + 2 + length, "true")
        ex.clear()
        clock.advance(10)
    nodes = ex.store.nodes()
    use: dict = {}
    for c in ex.store.contracts():
        for t in range(c["first_slot"], c["last_slot"] + 1):
            cpu, mem = use.get((c["node_id"], t), (0, 0))
            use[(c["node_id"], t)] = (cpu + c["cpu"], mem + c["mem"])
    for (n, t), (cpu, mem) in use.items():
        assert cpu <= nodes[n]["cpu"] and mem <= nodes[n]["mem"], (n, t)
    for c in ex.store.contracts():  # each contract lies inside its offer's window
        offer = next(o for o in ex.store.orders("offer") if o["id"] == c["offer_id"])
        assert offer["first_slot"] <= c["first_slot"] <= c["last_slot"] <= offer["last_slot"]


def test_split_is_exact_and_proportional():
    assert split(10, [1, 1, 1]) == [4, 3, 3]
    assert sum(split(1_000_001, [3, 5, 7])) == 1_000_001
    assert split(0, [2, 3]) == [0, 0]


@pytest.mark.parametrize("call, message", [
    (lambda ex: ex.submit_request("u", -1, 1, 1, 5, 6, "true"), "request field 'value'"),
    (lambda ex: ex.submit_request("u", 1, 0, 1, 5, 6, "true"), "request field 'cpu'"),
    (lambda ex: ex.submit_request("u", 1, 1, 1.5, 5, 6, "true"), "request field 'mem'"),
    (lambda ex: ex.submit_request("u", 1, 1, 1, 5, 4, "true"), "request field 'last_slot'"),
    (lambda ex: ex.submit_request("u", 1, 1, 1, 0, 4, "true"), "request field 'first_slot'"),
    (lambda ex: ex.submit_request("u u", 1, 1, 1, 5, 6, "true"), "request field 'user'"),
    (lambda ex: ex.submit_request("u", 1, 1, 1, 5, 6, " "), "request field 'command'"),
    (lambda ex: ex.submit_offer("p", "n", float("nan"), 5, 6), "offer field 'reserve'"),
    (lambda ex: ex.submit_offer("p", "nope", 1, 5, 6), "offer field 'node'"),
    (lambda ex: ex.submit_offer("p", "n", 1, 3, 8), "offer fields 'first_slot'/'last_slot'"),
    (lambda ex: ex.add_node("p", "n", 4, 10), "node field 'name'"),
    (lambda ex: ex.add_node("q", "m", 4, 10), "node field 'provider'"),
    (lambda ex: ex.add_node("p", "m", 0, 10), "node field 'cpu'"),
    (lambda ex: ex.join("p"), "already joined"),
    (lambda ex: ex.join("revenue"), "provider name 'revenue' is reserved"),  # the ledger's revenue account
])
def test_bad_input_names_the_field(tmp_path, call, message):
    ex, clock, _ = make_exchange(tmp_path / "x.db")
    ex.join("p")
    ex.add_node("p", "n", 4, 10)
    ex.submit_offer("p", "n", 1, 5, 6)
    clock.set(15)  # slot 1: slot 0 and 1 are not tradeable any more
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call(ex)


def test_exact_clearing_falls_back_to_greedex_on_a_large_book(tmp_path):
    """Above EXACT_MAX_ORDERS the period is cleared by GREEDEX with k-pricing, and says so."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="exact", k=0.5)
    ex.join("p")
    ex.add_node("p", "n", 8, 500)
    ex.submit_offer("p", "n", 1, 2, 9)
    for i in range(EXACT_MAX_ORDERS):
        ex.submit_request("u", 2 + i % 7, 1, 5, 2 + i % 5, 3 + i % 5, "true")
    ex.clear()
    assert ex.store.periods()[0]["mechanism"] == "k-pricing"
    clock.advance(30)
    ex.submit_request("u", 9, 2, 5, 8, 9, "true")
    ex.clear()
    assert ex.store.periods()[1]["mechanism"] == "exact"
    assert ex.store.orders("request")[-1]["state"] == "filled"
