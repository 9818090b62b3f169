"""The exchange's distributed randomized clearing (Stößer 2009, section 4.4, fig. 4.4): each
provider computes its runs from its own request, the exchange combines and prices; contracts
and payments equal the central computation on the same books and seeds, and a replay
reproduces them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exchange_helpers import make_exchange, trade
from marketsched.exchange.book import ClearingBook, book_rows, contracts_of, period_rng
from marketsched.exchange.distributed import MECHANISM, answer, assign_runs, clear_distributed, decode_run
from marketsched.exchange.provider_protocol import period_messages
from marketsched.exchange.replay import contract_terms, replay_session
from marketsched.exchange.store import to_micro
from marketsched.mechanisms.clearing.distributed import combine_and_price, local_step, run_seeds
from marketsched.mechanisms.clearing.orderbook import OrderBook, generate_order_book
from marketsched.mechanisms.clearing.randomized import distributed_randomized
from test_exchange_clearing import _session, offer_st, request_st

TERMS = ("request_id", "offer_id", "node_id", "cpu", "mem", "first_slot", "last_slot", "user_price",
         "provider_price")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_session_equals_the_central_mechanism_and_replays(tmp_path, seed):
    """Eight clearings of the helpers' market: every period's contracts, with their prices to the
    micro-unit, are those of :func:`distributed_randomized` on the recorded book with the
    period's random numbers; the replay makes the same contracts."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism=MECHANISM, seed=seed)
    trade(ex, clock, 8, seed=seed)
    alpha = ex.settings["alpha"]
    made, kinds = 0, set()
    for period in ex.store.periods():
        assert period["mechanism"] == MECHANISM
        cb = ClearingBook.from_json(period["book"])
        got = sorted(tuple(c[k] for k in TERMS) for c in ex.store.contracts() if c["period"] == period["id"])
        if not (cb.book.n_jobs and cb.book.n_nodes):
            assert got == []
            continue
        central = distributed_randomized(cb.book, alpha, period_rng(seed, period["id"]))
        want = sorted(tuple(leg[k] for k in TERMS) for leg in contracts_of(cb, central.allocation, central.payments))
        assert got == want
        made += len(got)
        kinds.add(central.randomized)
        msgs = period_messages(ex.store, period["id"])  # the period record keeps the messages
        asked = len(set(owners_of(ex, cb)))
        assert (msgs["calls"], msgs["answers"], msgs["dropped"], msgs["replies"]) == (asked, asked, [], None)
        assert msgs["bytes_sent"] > 0 and msgs["bytes_received"] > 0
    assert made > 0
    if seed == 1:  # both kinds of outcome occur: a randomized run is enforced in two periods
        assert kinds == {True, False}
    assert replay_session(ex.store) == contract_terms(ex.store)


def owners_of(ex, cb: ClearingBook) -> list[str]:
    return [ex.store.order(o)["owner"] for o in cb.piece_offer]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(request_st, min_size=1, max_size=8), offers=st.lists(offer_st, min_size=1, max_size=4))
def test_random_books_pay_what_the_central_mechanism_pays(tmp_path_factory, requests, offers):
    """One clearing of random orders with ties (whole-number prices): each request pays and each
    provider receives the central mechanism's payment to the micro-unit."""
    ex, book = _session(tmp_path_factory.mktemp("x"), MECHANISM, requests, offers)
    central = distributed_randomized(book, 10.0, period_rng(7, 1))
    contracts = ex.store.contracts()
    for j, order in enumerate(ex.store.orders("request")):
        paid = sum(c["user_price"] for c in contracts if c["request_id"] == order["id"])
        assert paid == to_micro(central.payments.job[j])
        assert (order["state"] == "filled") == bool(central.allocation.allocated[j])
    for n in range(book.n_nodes):
        got = sum(c["provider_price"] for c in contracts if c["provider"] == f"p{n}")
        assert got == to_micro(central.payments.node[n])


def test_each_provider_is_asked_once_for_its_own_runs_only():
    """One request per provider, holding the seeds of its runs (its nodes' and its share of the
    jobs') and the book without owners; the combined answers are the central outcome."""
    book = generate_order_book(6, 10, np.random.default_rng(4))
    owner = ["b", "a", "c", "a", "b", "a"]
    asked: dict[str, str] = {}

    def ask(provider, request):
        assert provider not in asked
        asked[provider] = request
        return answer(request)

    out, msgs = clear_distributed(book, owner, 3.0, np.random.default_rng(11), ask)
    runs = assign_runs(book, owner)
    assert sorted(asked) == ["a", "b", "c"] and msgs.calls == 3 and msgs.dropped == []
    assert runs["a"] == [0, 3, 6, 9, 11, 13, 15] and runs["b"] == [1, 4, 7, 10, 14] and runs["c"] == [2, 5, 8, 12]
    for p, text in asked.items():
        msg = json.loads(text)
        assert [r["run"] for r in msg["runs"]] == runs[p]
        assert set(msg) == {"book", "alpha", "runs"} and not any(name in text for name in ('"a"', '"b"', '"c"'))
    assert msgs.bytes_sent == sum(len(t.encode()) for t in asked.values())
    central = distributed_randomized(book, 3.0, np.random.default_rng(11))
    assert np.array_equal(out.allocation.assign, central.allocation.assign)
    assert np.array_equal(out.payments.job, central.payments.job)
    assert np.array_equal(out.payments.node, central.payments.node)


def test_a_hostile_provider_cannot_enforce_what_it_claims():
    """Provider "a" answers its runs with an oversold allocation, another run than asked and
    unreadable text in turn: its runs are dropped (each named), the others' kept, and the outcome
    is the combination of the honest answers, a feasible schedule."""
    book = generate_order_book(4, 12, np.random.default_rng(8))
    owner = ["a", "b", "a", "b"]
    runs = assign_runs(book, owner)
    piled = np.full((book.n_jobs, book.horizon), -1, dtype=np.int64)
    for j in range(book.n_jobs):
        piled[j, book.job_release[j]:book.job_end[j] + 1] = 0
    rows = [[j, *piled[j, book.job_release[j]:book.job_end[j] + 1].tolist()] for j in range(book.n_jobs)]
    for lie in (json.dumps({"runs": [{"run": r, "jobs": rows} for r in runs["a"]]}),
                json.dumps({"runs": [{"run": runs["b"][0], "jobs": []}]}),
                "not json"):
        def ask(provider, request, lie=lie):
            return lie if provider == "a" else answer(request)

        out, msgs = clear_distributed(book, owner, 2.0, np.random.default_rng(5), ask)
        assert msgs.dropped and all("provider 'a'" in why for why in msgs.dropped)
        seeds = run_seeds(np.random.default_rng(5), book.n_jobs + book.n_nodes)
        honest = local_step(book, 2.0, {r: seeds[r] for r in runs["b"]})
        want = combine_and_price(book, honest)
        assert np.array_equal(out.allocation.assign, want.allocation.assign)
        assert np.isnan(out.run_welfare[runs["a"]]).all()
        out.allocation.check_feasible()


@pytest.mark.parametrize("rows, message", [
    ("x", "not a list"),
    ([[True, 0]], "not a list of whole numbers"),
    ([[9, 0]], "names job 9"),
    ([[0]], "gives 0 nodes"),
])
def test_malformed_answers_name_the_problem(rows, message):
    book = generate_order_book(2, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match=message):
        decode_run(book, rows)


def test_node_owners_must_match_the_book():
    book = generate_order_book(2, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="names 1 providers for the book's 2 nodes"):
        clear_distributed(book, ["a"], 2.0, np.random.default_rng(0))


def test_exchange_init_takes_the_distributed_mode(tmp_path):
    """``exchange init --mechanism randomized-distributed``: the exchange made clears that way,
    and an unknown mechanism is refused by name."""
    from click.testing import CliRunner

    from marketsched.cli import main
    from marketsched.exchange.core import Exchange
    from marketsched.exchange.store import ExchangeStore
    from marketsched.platform.clock import FakeClock

    runner = CliRunner()
    res = runner.invoke(main, ["exchange", "init", str(tmp_path / "ex"), "--mechanism", MECHANISM, "--alpha", "4"])
    assert res.exit_code == 0 and MECHANISM in res.output, res.output
    store = ExchangeStore(tmp_path / "ex")
    assert store.settings()["mechanism"] == MECHANISM and store.settings()["alpha"] == 4.0
    ex = Exchange(store, FakeClock(store.settings()["epoch"]))
    ex.join("p1")
    ex.add_node("p1", "n", 4, 100)
    s = ex.slot()
    ex.submit_offer("p1", "n", 1, s + 2, s + 9)
    ex.submit_request("u1", 5, 2, 10, s + 3, s + 4, "true")
    ex.clear()
    assert [p["mechanism"] for p in store.periods()] == [MECHANISM] and len(store.contracts()) == 1
    bad = runner.invoke(main, ["exchange", "init", str(tmp_path / "ex2"), "--mechanism", "randomised"])
    assert bad.exit_code != 0 and "randomized-distributed" in bad.output
    bad = runner.invoke(main, ["exchange", "init", str(tmp_path / "ex3"), "--answer-seconds", "5"])
    assert bad.exit_code != 0 and "'answer_seconds' is for the randomized-distributed mechanism" in bad.output
    res = runner.invoke(main, ["exchange", "init", str(tmp_path / "ex4"), "--mechanism", MECHANISM,
                               "--answer-seconds", "5"])
    assert res.exit_code == 0 and ExchangeStore(tmp_path / "ex4").settings()["answer_seconds"] == 5.0


def test_a_provider_that_does_not_answer_is_left_out():
    """An ``ask`` that times out (as a provider agent over the API would): that provider's runs
    are left out, named, and so is its capacity: the clearing is the combination of the others'
    answers that do not use its node, on the book without that node."""
    book = generate_order_book(4, 10, np.random.default_rng(10))
    owner = ["a", "b", "c", "a"]

    def ask(provider, request):
        if provider == "b":
            raise TimeoutError("no answer within the period")
        return answer(request)

    out, msgs = clear_distributed(book, owner, 2.0, np.random.default_rng(2), ask)
    runs = assign_runs(book, owner)
    assert msgs.calls == 3 and msgs.answers == 2 and msgs.left_out == [1]
    assert msgs.dropped[0] == "provider 'b' did not answer: no answer within the period"
    seeds = run_seeds(np.random.default_rng(2), book.n_jobs + book.n_nodes)
    others = local_step(book, 2.0, {r: seeds[r] for r in runs["a"] + runs["c"]})
    jobs, nodes = book_rows(book)
    sub = OrderBook.from_rows(jobs, [nodes[0], nodes[2], nodes[3]])  # node 1 (b's) is not sold
    renumber = {-1: -1, 0: 0, 2: 1, 3: 2}
    kept = {r: np.vectorize(renumber.get)(a) for r, a in others.items() if not (a == 1).any()}
    assert 0 < len(kept) < len(others)  # some runs used b's node and are dropped, named
    assert len(msgs.dropped) == 1 + len(others) - len(kept)
    want = combine_and_price(sub, kept, book.n_jobs + book.n_nodes)
    assert out.allocation.book.n_nodes == 3
    assert np.array_equal(out.allocation.assign, want.allocation.assign)
    assert np.array_equal(out.payments.job, want.payments.job)
    assert np.isnan(out.run_welfare[runs["b"]]).all()


def test_the_clearing_inside_the_write_transaction_asks_no_agent(tmp_path):
    """With provider agents, the clearing made inside the write transaction (after stale
    results) publishes no ask (the API could not write the answers): every provider is named as
    not asked, keeps its capacity, and the contracts are the deterministic greedy's with
    critical values on the recorded book."""
    from marketsched.exchange.clearing import clear_now
    from marketsched.exchange.core import Exchange, create_exchange
    from marketsched.exchange.store import ExchangeStore
    from marketsched.mechanisms.clearing.greedex import critical_value_pricing, greedy_allocation
    from marketsched.platform.clock import FakeClock

    store = ExchangeStore(tmp_path / "ex")
    create_exchange(store, slot_seconds=10.0, period_seconds=30.0, mechanism=MECHANISM, seed=1, answer_seconds=5.0)
    ex = Exchange(store, FakeClock())
    for i, p in enumerate(("p1", "p2")):
        ex.join(p)
        ex.add_node(p, "n0", 4, 64)
        ex.submit_offer(p, "n0", 1.0 + i, 1, 50)
    for u in range(5):
        ex.submit_request(f"u{u}", 3.0 + u, 2, 8, 2, 3, "true")
    assert ex.gathers is not None
    period = clear_now(store, store.settings(), 0.0, 1, stale_retries=0, gathers=ex.gathers)
    assert store.rows("SELECT COUNT(*) FROM ex_asks")[0][0] == 0
    msgs = period_messages(store, period)
    assert msgs["left_out"] == [] and msgs["answers"] == 0
    assert msgs["dropped"] == [f"provider '{p}' was not asked: the clearing ran inside the write transaction"
                               for p in ("p1", "p2")]
    cb = ClearingBook.from_json(store.periods()[0]["book"])
    assert cb.book.n_nodes == 2
    det = greedy_allocation(cb.book)
    want = sorted(tuple(leg[k] for k in TERMS) for leg in contracts_of(cb, det, critical_value_pricing(cb.book, det)))
    assert want and sorted(tuple(c[k] for k in TERMS) for c in store.contracts()) == want
