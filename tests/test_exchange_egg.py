"""Egg mode of the exchange (Kang & Parkes 2007) on a fake clock and fake provider backends: the
paper's worked examples through the exchange, escrow release and refund, reliability from
outcomes, hostile input, and the replay of the records through the library.

References kept plain in the tests: the escrow's money (deposits less the prices of awards not
refunded; providers paid the prices delivered and due) and the reliability (Beta(1, 1) mean:
``(1 + delivered) / (2 + delivered + failed)``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from exchange_helpers import Machines
from marketsched.exchange import egg
from marketsched.exchange.api import ExchangeService
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.egg_api import ROUTES
from marketsched.exchange.store import MICRO, ExchangeStore
from marketsched.platform.clock import FakeClock
from marketsched.platform.http import parse_body
from marketsched.platform.validation import MarketError

HOUR = 3600.0
EXAMPLE = [[9, 5, 4, 6], [19, 17, 13, 15], [24, 20, 15, 21]]  # Kang & Parkes 2007, example 2 (memory x hours)


def egg_exchange(path, cfg=None, slot=HOUR, providers=("p1",), node=(4, 100)):
    """An Egg exchange (single-user, fake clock and backends) with ``providers``, one node each."""
    store = ExchangeStore(path)
    create_exchange(store, slot_seconds=slot, period_seconds=slot, mechanism="egg",
                    egg=cfg or egg.default_settings(patience_slots=3, horizon_slots=4, edges=[[0, 2, 4, 8]],
                                                    runtime_dim=None))
    clock = FakeClock()
    machines = Machines(clock)
    ex = Exchange(store, clock, machines)
    ex.single_user = True
    for p in providers:
        ex.join(p)
        ex.add_node(p, "n", *node)
    return ex, clock, machines


def act(ex, fn, *args):
    with ex.store.transaction():
        return fn(ex.egg, *args, ex.clock())


def bid(ex, user, **body):
    return act(ex, egg.submit_bid, user, {"description": [2.5], "command": "true", **body})


def test_paper_examples_through_the_exchange(tmp_path):
    """Example 2: a 2.5 MB job whose value is 19 until t0 + 2 h and 17 until t0 + 3 h is scheduled
    by the end of hour 3 (column [t0+2, t0+3), tau* = t0 + 2 h) at price 13; example 1: raising
    the table is admissible, lowering a locked column is refused naming the cells."""
    ex, clock, _ = egg_exchange(tmp_path / "x.db")
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    got = bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])
    assert (got["provider"], got["slot"], got["tau"], got["price"], got["value"]) == ("p1", 2, 2 * HOUR, 13.0, 17.0)
    assert ex.store.available("u1")["balance"] == 87 * MICRO
    assert ex.store.balances()[egg.ESCROW] == 13 * MICRO
    act(ex, egg.post_prices, "p1", (np.array(EXAMPLE) + 1).tolist())
    with pytest.raises(ValueError, match=r"def6\(2\) no decrease inside the patience window") as e:
        act(ex, egg.post_prices, "p1", (np.array(EXAMPLE) - 1).tolist())
    assert "9 cell(s)" in str(e.value)  # the three locked columns of three rows
    # the fourth column is outside the window: it may fall
    ok = np.array(EXAMPLE) + 1
    ok[:, 3] = [1, 2, 3]
    act(ex, egg.post_prices, "p1", ok.tolist())
    assert egg.reliability(ex.egg, clock())[0]["prices"][0] == [10, 6, 5, 1]
    ex.store.check_books()


def test_the_auctioneer_picks_the_best_surplus_provider_and_prices_by_its_table(tmp_path):
    ex, clock, _ = egg_exchange(tmp_path / "x.db", providers=("p1", "p2"))
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    act(ex, egg.post_prices, "p2", (np.array(EXAMPLE) - [[0, 0, 0, 0], [2, 2, 2, 0], [0, 0, 0, 0]]).tolist())
    got = bid(ex, "u1", value=19, deadline=3 * HOUR)
    # p2 lists 11 for column 2, p1 13: surplus 8 against 6 (p2's column 1 gives 19 - 15 = 4)
    assert (got["provider"], got["slot"], got["price"]) == ("p2", 2, 11.0)
    # nothing within the value: no award, no money moves
    before = ex.store.balances()
    assert bid(ex, "u1", value=3, deadline=3 * HOUR)["scheduled"] is False
    assert ex.store.balances() == before
    ex.leave("p2")  # a provider that left is asked no more, and its table is withdrawn
    assert bid(ex, "u1", value=19, deadline=3 * HOUR)["provider"] == "p1"
    assert egg.replay(ex.store) == egg.recorded(ex.store)


def test_escrow_is_released_to_the_provider_at_tau_after_delivery(tmp_path):
    ex, clock, machines = egg_exchange(tmp_path / "x.db")
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    cid = bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])["contract"]
    ex.tick()
    backend = machines.by_name["p1"]
    assert [s[0] for s in backend.started] == [cid]
    clock.advance(600)
    backend.exit(cid, 0)
    ex.tick()
    c = egg.contracts(ex.store)[0]
    assert (c["state"], c["escrow"]) == ("delivered", "held")  # result withheld until tau* (rule R6)
    assert ex.store.balances()[egg.ESCROW] == 13 * MICRO
    clock.advance(2 * HOUR - clock())
    ex.tick()
    c = egg.contracts(ex.store)[0]
    assert (c["escrow"], c["settled_t"]) == ("paid", 2 * HOUR)
    bal = ex.store.balances()
    assert (bal["provider:p1"], bal[egg.ESCROW], bal["user:u1"]) == (13 * MICRO, 0, 87 * MICRO)
    (p,) = egg.reliability(ex.egg, clock())
    assert (p["reliability"], p["completed"], p["settled"]) == (2 / 3, 1, 1)
    ex.store.check_books()


def test_a_provider_fault_refunds_the_user_and_lowers_its_reliability(tmp_path):
    ex, clock, machines = egg_exchange(tmp_path / "x.db", providers=("p1", "p2"))
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    act(ex, egg.post_prices, "p2", (np.array(EXAMPLE) + 1).tolist())
    cid = bid(ex, "u1", value=19, deadline=3 * HOUR)["contract"]
    ex.tick()
    machines.by_name["p1"].fail(cid, "node lost")
    ex.tick()
    assert egg.contracts(ex.store)[0]["state"] == "failed"
    clock.advance(2 * HOUR)
    ex.tick()
    c = egg.contracts(ex.store)[0]
    assert c["escrow"] == "refunded"
    bal = ex.store.balances()
    assert (bal["user:u1"], bal[egg.ESCROW], bal["provider:p1"]) == (100 * MICRO, 0, 0)
    rel = {p["provider"]: p["reliability"] for p in egg.reliability(ex.egg, clock())}
    assert rel == {"p1": 1 / 3, "p2": 0.5}
    # a bidder asking for reliability >= 0.5 is served by p2 only, although p1 is cheaper (13 < 14)
    assert bid(ex, "u1", value=19, deadline=HOUR, min_reliability=0.5)["provider"] == "p2"
    assert bid(ex, "u1", value=19, deadline=HOUR)["provider"] == "p1"
    ex.store.check_books()


def test_lapsed_and_roomless_contracts(tmp_path):
    """No node with room: failed at the provider's cost (refund, reliability down); the exchange
    down through the window: lapsed (refund, reliability untouched)."""
    ex, clock, machines = egg_exchange(tmp_path / "x.db", node=(1, 100))
    ex.deposit("u1", 100)
    # the current column priced at 5, later ones at 1: a bid of value 5 is due at the next slot's start
    act(ex, egg.post_prices, "p1", np.tile([5.0, 1, 1, 1], (3, 1)).tolist())
    first = bid(ex, "u1", value=5, deadline=3 * HOUR)["contract"]
    second = bid(ex, "u1", value=5, deadline=3 * HOUR, cpu=1)["contract"]  # the node's one CPU unit is taken
    ex.tick()
    states = {c["id"]: c["state"] for c in egg.contracts(ex.store)}
    assert states == {first: "running", second: "failed"}
    clock.advance(HOUR)
    ex.tick()
    rel = egg.reliability(ex.egg, clock())[0]
    assert (rel["completed"], rel["settled"]) == (1, 2)  # the first ran its window: delivered
    act(ex, egg.post_prices, "p1", np.tile([5.0, 1, 1, None], (3, 1)).tolist())  # raising is admissible
    award = bid(ex, "u1", value=5, deadline=3 * HOUR)
    third = award["contract"]
    assert award["tau"] == 2 * HOUR
    clock.advance(HOUR)  # no tick while its window passed: the exchange was down
    ex.tick()
    c = {c["id"]: c for c in egg.contracts(ex.store)}[third]
    assert (c["state"], c["escrow"]) == ("lapsed", "refunded")
    rel = egg.reliability(ex.egg, clock())[0]
    assert (rel["completed"], rel["settled"]) == (1, 2)
    assert ex.store.balances()["user:u1"] == 99 * MICRO  # only the delivered price left
    ex.store.check_books()


def test_hostile_input_is_refused_and_the_books_stay_exact(tmp_path):
    ex, clock, _ = egg_exchange(tmp_path / "x.db", providers=("p1", "p2"))
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    route = {r.path: r for r in ROUTES if r.method == "POST"}

    def post(who, path, body):
        r = route[path]
        return r.handler(service, who, {}, parse_body(json.dumps(body).encode(), r.body, r.noun))

    p1, p2, u1 = ("provider", "p1"), ("provider", "p2"), ("user", "u1")
    post(p2, "/api/egg/prices", {"prices": sum(EXAMPLE, [])})
    with pytest.raises(MarketError, match=r"unknown field\(s\) \['provider'\]"):  # p1 posting p2's table
        post(p1, "/api/egg/prices", {"provider": "p2", "prices": np.zeros(12).tolist()})
    with pytest.raises(MarketError, match=r"cell \[0, 1\].*got -1"):
        post(p1, "/api/egg/prices", {"prices": [1, -1] + [1] * 10})
    with pytest.raises(MarketError, match="list of 12 numbers"):
        post(p1, "/api/egg/prices", {"prices": [1, 2]})
    with pytest.raises(MarketError, match="only providers post price tables") as e:
        post(u1, "/api/egg/prices", {"prices": [1] * 12})
    assert e.value.status == 403
    with pytest.raises(MarketError, match="only users bid") as e:
        post(p1, "/api/egg/bids", {"description": [1], "value": 1, "deadline": 10, "command": "x"})
    assert e.value.status == 403
    body = {"description": [2.5], "value": 19, "deadline": 3 * HOUR, "command": "true"}
    with pytest.raises(MarketError, match="may cost up to 19.000000.*has available"):  # no money
        post(u1, "/api/egg/bids", body)
    ex.deposit("u1", 18)
    with pytest.raises(MarketError, match="may cost up to 19"):
        post(u1, "/api/egg/bids", body)
    for bad, msg in (({"value": -1}, "'values' entry 0"), ({"deadline": 0}, "must be > 0"),
                     ({"description": [1, 2]}, "list of 1 number"), ({"min_reliability": 2}, "from 0 to 1"),
                     ({"until": [1, 2], "values": [1, 2]}, "give either")):
        with pytest.raises(MarketError, match=msg):
            post(u1, "/api/egg/bids", {**body, **bad})
    assert egg.contracts(ex.store) == []
    assert ex.store.rows("SELECT kind FROM ex_egg_events") == [("prices",)]  # p2's table only
    # a job larger than every node of p2 is not p2's to win (it could only fail there)
    ex.deposit("u1", 10)
    assert post(u1, "/api/egg/bids", {**body, "cpu": 5})["scheduled"] is False
    assert post(u1, "/api/egg/bids", {**body, "mem": 101})["scheduled"] is False
    assert egg.contracts(ex.store) == [] and ex.store.available("u1")["balance"] == 28 * MICRO
    assert egg.reliability(ex.egg, clock())[0]["prices"] == [[None] * 4] * 3  # p1's table untouched
    with pytest.raises(ValueError, match="runs Egg"):
        ex.submit_request("u1", 1, 1, 0, 1, 2, "true")
    ex.store.check_books()
    service.store.close()


def test_replay_through_the_library_gives_the_recorded_choices_and_payments(tmp_path):
    """A random run (tables posted admissibly by projection, bids, deliveries and faults) on
    the run-time geometry; the replay from the events alone equals the record; the money equals
    the plain reference."""
    rng = np.random.default_rng(5)
    cfg = egg.default_settings(patience_slots=4, horizon_slots=10, edges=[[0, 60, 300, 900, 3600]])
    ex, clock, machines = egg_exchange(tmp_path / "x.db", cfg=cfg, slot=600.0, providers=("p1", "p2", "p3"),
                                       node=(2, 100))
    for u in ("u1", "u2"):
        ex.deposit(u, 1000)
    for _ in range(12):
        for k, p in enumerate(("p1", "p2", "p3")):
            if rng.random() < 0.7:
                book = ex.egg.sync().book
                wish = np.round(rng.uniform(1, 4) * (1 + np.arange(4))[:, None] * rng.integers(1, 3, (1, 10)), 0)
                act(ex, egg.post_prices, p, table_wish(book, ex.egg.index(p), wish, clock()))
        for _ in range(int(rng.integers(1, 4))):
            bid(ex, str(rng.choice(["u1", "u2"])), description=[float(rng.choice([30, 200, 600]))],
                value=float(rng.integers(2, 30)), deadline=float(rng.choice([1200, 2400, 3600])),
                min_reliability=float(rng.choice([0, 0, 0.45])))
        ex.tick()
        for name, backend in machines.by_name.items():  # p1's side ends its jobs, p2's and p3's exit
            for cid in list(backend.live):
                backend.fail(cid) if name == "p1" else backend.exit(cid, 0)
        clock.advance(float(rng.choice([300, 600, 900])))
        ex.tick()
    clock.advance(3 * 3600)
    ex.tick()
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    got = egg.contracts(ex.store)
    assert len(got) > 5 and {c["escrow"] for c in got} == {"paid", "refunded"}
    bal = ex.store.balances()
    for u in ("u1", "u2"):
        spent = sum(c["price"] for c in got if c["user"] == u and c["escrow"] != "refunded")
        assert bal[f"user:{u}"] == 1000 * MICRO - spent
    for p in ("p1", "p2", "p3"):
        mine = [c for c in got if c["provider"] == p]
        assert bal.get(f"provider:{p}", 0) == sum(c["price"] for c in mine if c["escrow"] == "paid")
        ok = sum(c["state"] == "delivered" for c in mine)
        bad = sum(c["state"] == "failed" for c in mine)
        (r,) = [x for x in egg.reliability(ex.egg, clock()) if x["provider"] == p]
        assert r["reliability"] == pytest.approx((1 + ok) / (2 + ok + bad))
    ex.store.check_books()


def table_wish(book, k, wish, t):
    """A provider's wish made admissible by the library's projection (as its provider agents do)."""
    return egg.table_json(book.project(k, wish, t))


def test_price_agents_post_the_library_pricing_made_admissible(tmp_path):
    """The library's static, capped and load-aware agents (as `exchange egg prices` runs them):
    static = rate x (bucket's upper edge in hours + fee) in every column; capped closes buckets
    that no longer fit the capacity beside the open contracts; the exchange takes each table."""
    from marketsched.exchange.api import ExchangeService
    from marketsched.exchange.egg_api import market
    from marketsched.exchange.egg_cli import agent_table

    cfg = egg.default_settings(patience_slots=2, horizon_slots=6, edges=[[0, 1800, 3600, 10800]])
    ex, clock, _ = egg_exchange(tmp_path / "x.db", cfg=cfg, slot=HOUR, providers=("p1",), node=(1, 100))
    service = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    ex.deposit("u1", 100)
    info = market(service)
    assert info["providers"][0]["posted"] is False
    static = np.array(agent_table(info, "p1", "static", 1, [], rate=2.0, fee=0.5), float).reshape(3, 6)
    assert np.array_equal(static, np.repeat([[2.0], [3.0], [7.0]], 6, axis=1))  # 2 x (0.5, 1, 3 h + 0.5)
    act(ex, egg.post_prices, "p1", static.tolist())
    got = bid(ex, "u1", description=[3000], value=10, deadline=2 * HOUR)  # 3000 s: bucket [1800, 3600)
    assert (got["price"], got["tau"]) == (3.0, 3000.0)
    info = market(service)
    mine = [c for c in egg.contracts(ex.store)]
    capped = agent_table(info, "p1", "capped", 1, mine, rate=2.0, fee=0.5)
    table = np.array([np.inf if x is None else x for x in capped]).reshape(3, 6)
    # 3000 s of the first hour are sold: free CPU-seconds by the end of hours 1-4 are 600, 4200,
    # 7800, 11400, so a bucket closes where its upper edge (1800, 3600, 10800 s) does not fit
    # (closing is a rise: admissible inside the patience window too)
    closed = np.isinf(table[:, :4])
    assert closed.tolist() == [[True, False, False, False], [True, False, False, False], [True, True, True, False]]
    assert table[0, 1] == 2.0 and table[2, 3] == 7.0
    act(ex, egg.post_prices, "p1", capped)
    load = agent_table(market(service), "p1", "load", 1, mine, rate=2.0, fee=0.5, kappa=4.0)
    act(ex, egg.post_prices, "p1", load)
    assert ex.store.rows("SELECT COUNT(*) FROM ex_egg_events WHERE kind = 'prices'") == [(3,)]
    service.store.close()


def test_an_audit_case_replayed_on_the_exchange_has_the_same_utility_change(tmp_path):
    """Kang & Parkes (2007), Theorem 1, on the exchange: `marketsched audit`'s case of job 76
    (a value shaded to half, a deadline halved) re-run on the exchange. For the truthful run
    and each lie, the providers' tables the simulated job met at its arrival are posted on a
    fresh exchange at that time, the job bids its (mis)report over the exchange's Egg path, its
    job is delivered and its escrow settled at tau*; its true utility is its true value at tau*
    less what the ledger took. The awards equal the simulator's and the gain has the audit's
    sign (here: 0 for the shading, a loss for the halved deadline, which finds no provider)."""
    from marketsched.analysis import audit as au
    from marketsched.engine.simulator import Simulator
    from marketsched.mechanisms.online.egg import Linear
    from marketsched.mechanisms.online.egg.presets import DELTA, HORIZON, SLOT
    from marketsched.mechanisms.registry import build
    from marketsched.scenario import Scenario, WorkloadSpec, in_form

    jobs = in_form(Scenario(WorkloadSpec(synthetic_jobs=200, synthetic_nodes=8, seed=0), seed=1).build(), "egg")[0]
    devs = au.Deviation.parse("value:0.5") + au.Deviation.parse("deadline:0.5")
    table = au.audit(jobs, "egg", {}, devs, job_ids=[76])
    (rows,) = au.rows_of(jobs, [76])
    row = int(rows[0])
    a = float(jobs.workload.submit_time[row])
    true = Linear(float(jobs.true_value[row] * (jobs.deadline[row] - a)), 0.0, a, float(jobs.deadline[row]))

    def live_utility(js, where):
        policy, _ = build("egg", js, {})
        seen = {}
        policy.probes = [(a, lambda pol, t: seen.setdefault("market", pol.market.copy()))]
        Simulator(js.workload, policy, capacity=getattr(policy, "engine_capacity", None)).run()
        market = seen["market"]
        K = market.n_providers
        ex, clock, machines = egg_exchange(where, cfg=egg.default_settings(int(DELTA / SLOT), HORIZON), slot=SLOT,
                                           providers=[f"p{k}" for k in range(K)], node=(64, 1000))
        clock.advance(a - clock())
        ex.deposit("u", 1e8)
        for k in range(K):
            act(ex, egg.post_prices, f"p{k}", egg.table_json(market.book.prices[k]))
        b = policy.bids.take(np.array([row]))
        got = act(ex, egg.submit_bid, "u", {
            "description": [float(b.description[0, 0])], "value": float(b.v_start[0]), "value_end": float(b.v_end[0]),
            "deadline": float(b.t_deadline[0] - a), "min_reliability": float(b.min_reliability[0]), "command": "true"})
        sim = (int(policy.provider[row]), float(policy.completion[row]), egg.to_micro(policy.price[row]))
        if not got["scheduled"]:
            assert sim[0] == -1
            return 0.0
        assert (int(got["provider"][1:]), got["tau"], egg.to_micro(got["price"])) == sim  # the simulator's award
        ex.tick()
        for backend in machines.by_name.values():
            for cid in list(backend.live):
                backend.exit(cid, 0)
        clock.advance(got["tau"] - clock())
        ex.tick()
        (c,) = egg.contracts(ex.store)
        assert c["escrow"] == "paid"
        paid = (1e8 * MICRO - ex.store.balances()["user:u"]) / MICRO
        return float(true.value_at(got["tau"])) - paid

    u0 = live_utility(jobs, tmp_path / "truth.db")
    for dev, (_, case) in zip(devs, table.iterrows()):
        u1 = live_utility(au.deviate(jobs, rows, dev)[0], tmp_path / f"{dev.kind}.db")
        assert np.sign(round(u1 - u0, 3)) == np.sign(round(case["gain"], 3)), (dev, u1 - u0, case["gain"])
        assert u1 - u0 <= 1e-6  # no gain (Theorem 1)
    assert list(np.sign(table["gain"])) == [0, -1]  # the check is not vacuous: one lie costs


def test_a_restarted_exchange_reattaches_egg_jobs_and_a_tampered_record_fails_the_replay(tmp_path):
    """kill -9 and start again: a running Egg job is re-attached (the machines outlive the
    exchange), delivered and paid at tau*; the market is rebuilt from the events alone. A
    contract whose recorded price is changed no longer matches the replay."""
    ex, clock, machines = egg_exchange(tmp_path / "ex")
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    cid = bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])["contract"]
    ex.tick()
    ex.store.close()
    ex = Exchange(ExchangeStore(tmp_path / "ex"), clock, machines)
    ex.single_user = True
    ex.recover()
    assert egg.contracts(ex.store)[0]["state"] == "running"
    machines.by_name["p1"].exit(cid, 0)
    clock.advance(2 * HOUR)
    ex.tick()
    c = egg.contracts(ex.store)[0]
    assert (c["state"], c["escrow"]) == ("delivered", "paid")
    assert egg.reliability(ex.egg, clock())[0]["completed"] == 1
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    with ex.store.transaction():
        ex.store.conn.execute("UPDATE ex_egg_contracts SET price = price - 1")
    assert egg.replay(ex.store) != egg.recorded(ex.store)
    from click.testing import CliRunner

    from marketsched.cli import main

    ex.store.close()
    out = CliRunner().invoke(main, ["exchange", "replay", str(tmp_path / "ex")])
    assert out.exit_code != 0 and "differs from the record at contract 1" in out.output
    ex = Exchange(ExchangeStore(tmp_path / "ex"), clock, machines)
    with pytest.raises(AssertionError, match="egg-escrow posted 13000000, expected 12999999"):
        ex.store.check_books()


class Crash(Exception):
    """The exchange is killed (kill -9) at this point."""


@pytest.mark.parametrize("started", [False, True])
def test_a_crash_in_the_stop_at_tau_keeps_the_verdict_of_tau(tmp_path, started):
    """The exchange stops a job at ``tau*`` (cancelled as Slurm records it: "CANCELLED by 0",
    the exchange's account) and dies before its verdict: the restarted exchange judges by what
    it recorded before the stop (started: delivered and paid; never started: the provider's
    failure), never by its own cancel."""
    ex, clock, machines = egg_exchange(tmp_path / "ex")
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    cid = bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])["contract"]
    ex.tick()
    backend = machines.by_name["p1"]
    if not started:
        backend.pending.add(cid)  # the provider's queue holds it past tau*
    real_stop = backend.stop

    def dying_stop(c):
        real_stop(c)
        backend.faults[c] = "slurm: CANCELLED by 0 (not by the job's account)"
        backend._news.append((c, None))
        raise Crash

    backend.stop = dying_stop
    clock.advance(2 * HOUR)
    with pytest.raises(Crash):
        ex.tick()
    backend.stop = real_stop
    ex.store.close()
    ex = Exchange(ExchangeStore(tmp_path / "ex"), clock, machines)
    ex.single_user = True
    ex.recover()
    ex.tick()
    c = egg.contracts(ex.store)[0]
    if started:
        assert (c["state"], c["escrow"], c["note"]) == ("delivered", "paid", "ran until tau*")
    else:
        assert (c["state"], c["escrow"], c["note"]) == ("failed", "refunded", "the provider had not started the job by tau*")
    ex.store.check_books()


def test_init_with_the_egg_mechanism_takes_bids_not_orders(tmp_path):
    from click.testing import CliRunner

    from marketsched.cli import main

    data = tmp_path / "ex"
    out = CliRunner().invoke(main, ["exchange", "init", str(data), "--mechanism", "egg", "--slot-seconds", "60"])
    assert out.exit_code == 0, out.output
    assert "egg, slots of 60 s, an award at each bid (no clearing)" in out.output
    store = ExchangeStore(data)
    assert store.settings()["deposits"] == 1  # Egg collects at the award
    cfg = egg.settings_of(store)
    assert (cfg["patience_slots"], cfg["horizon_slots"], cfg["runtime_dim"]) == (24, 50, 0)
    store.close()
    assert CliRunner().invoke(main, ["exchange", "join", str(data), "p1"]).exit_code == 0
    assert CliRunner().invoke(main, ["exchange", "node", str(data), "p1", "n0", "--cpu", "1", "--mem", "10"]).exit_code == 0
    out = CliRunner().invoke(main, ["exchange", "offer", str(data), "p1", "n0", "--reserve", "1", "--first-slot",
                                    "999999999", "--last-slot", "999999999"])
    assert out.exit_code != 0 and "runs Egg" in out.output
    out = CliRunner().invoke(main, ["exchange", "egg", "status", str(data)])
    assert out.exit_code == 0 and json.loads(out.output)["replay_equal"] is True
    out = CliRunner().invoke(main, ["exchange", "init", str(tmp_path / "e2"), "--mechanism", "egg", "--egg-patience", "6"])
    assert out.exit_code == 0, out.output
    store = ExchangeStore(tmp_path / "e2")
    assert (egg.settings_of(store)["patience_slots"], egg.settings_of(store)["horizon_slots"]) == (6, 14)
    store.close()
    out = CliRunner().invoke(main, ["exchange", "init", str(tmp_path / "e3"), "--egg-patience", "6"])
    assert out.exit_code != 0 and "is for --mechanism egg" in out.output


def test_exchange_status_shows_egg_contracts_by_state_and_the_escrow_held(tmp_path):
    """``exchange status`` (text and --json) on an Egg exchange shows its contracts by state and
    escrow and the escrow held, as ``exchange egg status`` does; reference: the contracts
    counted one by one, the held ones' prices summed, and the escrow account's balance."""
    from click.testing import CliRunner

    from marketsched.cli import main

    ex, clock, machines = egg_exchange(tmp_path / "ex")
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    a = bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])["contract"]
    b = bid(ex, "u1", value=19, deadline=3 * HOUR)["contract"]
    ex.tick()
    machines.by_name["p1"].exit(a, 0)
    machines.by_name["p1"].fail(b, "node lost")
    ex.tick()
    data = str(tmp_path / "ex")
    for settle in (False, True):
        if settle:
            clock.advance(2 * HOUR)
            ex.tick()
        rows = egg.contracts(ex.store)
        by: dict[str, int] = {}
        for c in rows:
            by[f"{c['state']}/{c['escrow']}"] = by.get(f"{c['state']}/{c['escrow']}", 0) + 1
        held = [c["price"] for c in rows if c["escrow"] == "held"]
        assert len(held) == (0 if settle else 2) and ex.store.balances()[egg.ESCROW] == sum(held)
        want = {"contracts": by, "escrow_held": {"count": len(held), "amount": sum(held) / MICRO}}
        out = CliRunner().invoke(main, ["exchange", "status", data, "--json"])
        assert out.exit_code == 0, out.output
        assert json.loads(out.output)["egg"] == want
        out = CliRunner().invoke(main, ["exchange", "egg", "status", data])
        got = json.loads(out.output)
        assert {k: got[k] for k in want} == want
        out = CliRunner().invoke(main, ["exchange", "status", data])
        assert out.exit_code == 0, out.output
        assert ("Egg contracts (state/escrow): " + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))) in out.output
        assert f"Egg escrow held: {sum(held) / MICRO:.6f} in {len(held)} contracts" in out.output


def test_the_information_pages_egg_data_are_each_providers_table_record_contracts_and_escrow(tmp_path):
    """``GET /api/egg/market`` (what the page shows): per provider its reliability, its table compact
    (runs that expand back to the table), its contracts by state and the escrow held for them; the
    exchange's contracts by state/escrow and escrow held; against plain counts of the contracts."""
    ex, clock, machines = egg_exchange(tmp_path / "x.db", providers=("p1", "p2"))
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    act(ex, egg.post_prices, "p2", (np.array(EXAMPLE) + 1).tolist())
    first = bid(ex, "u1", value=19, deadline=3 * HOUR)["contract"]
    bid(ex, "u1", value=19, deadline=3 * HOUR, min_reliability=0.6)  # no provider is that reliable yet
    ex.tick()
    machines.by_name["p1"].fail(first, "node lost")
    ex.tick()
    clock.advance(2 * HOUR)
    ex.tick()
    second = bid(ex, "u1", value=30, deadline=HOUR)
    assert second["provider"] == "p1"  # its table is still the cheapest
    svc = ExchangeService(ExchangeStore(tmp_path / "x.db"), clock)
    (route,) = [r for r in ROUTES if r.path == "/api/egg/market"]
    got = route.handler(svc, None, {}, None)
    cons = egg.contracts(ex.store)
    for p in got["providers"]:
        mine = [c for c in cons if c["provider"] == p["provider"]]
        states: dict[str, int] = {}
        for c in mine:
            states[c["state"]] = states.get(c["state"], 0) + 1
        assert p["contracts"] == states
        assert p["escrow_held"] == sum(c["price"] for c in mine if c["escrow"] == "held") / MICRO
        expanded = [sum(([x] * n for x, n in row), []) for row in p["table"]]
        assert expanded == p["prices"]
        assert all(a[0] != b[0] for row in p["table"] for a, b in zip(row, row[1:]))  # runs are maximal
    rows = {p["provider"]: p for p in got["providers"]}
    assert rows["p1"]["contracts"] == {"failed": 1, "pending": 1} and rows["p2"]["contracts"] == {}
    assert rows["p1"]["escrow_held"] == second["price"] and rows["p1"]["reliability"] == 1 / 3
    assert got["contracts"] == {"failed/refunded": 1, "pending/held": 1}
    assert got["escrow_held"] == {"count": 1, "amount": second["price"]}


def test_a_provider_that_leaves_withdraws_its_table_and_its_contracts_settle_by_the_fault_table(tmp_path):
    """Attack: p1, the cheapest, leaves right after an award; a bid after the leave is never awarded
    to it (not through the view, not through the auctioneer: a bid whose view still names it finds
    no price), its pending contract fails at its cost (refund at tau*, reliability down), the market
    lists no table for it but keeps its record, and the replay agrees."""
    ex, clock, machines = egg_exchange(tmp_path / "x.db", providers=("p1", "p2"))
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    act(ex, egg.post_prices, "p2", (np.array(EXAMPLE) + 1).tolist())
    cid = bid(ex, "u1", value=19, deadline=3 * HOUR)["contract"]
    assert egg.contracts(ex.store)[0]["provider"] == "p1"
    clock.advance(60)
    ex.leave("p1")
    for _ in range(3):
        got = bid(ex, "u1", value=30, deadline=3 * HOUR)
        assert got["provider"] == "p2"
    with pytest.raises(ValueError, match="has left"):
        act(ex, egg.post_prices, "p1", (np.array(EXAMPLE) + 2).tolist())
    # the auctioneer itself: a bid whose view still names p1 is not awarded to it
    market = ex.egg.sync().copy()
    view_p1 = {"description": [2.5], "until": [3 * HOUR], "values": [30.0], "min_reliability": 0.0, "view": [0]}
    out, _ = egg.apply_event(market, clock(), "bid", None, view_p1)
    assert not out.scheduled[0]
    ex.tick()
    c = {c["id"]: c for c in egg.contracts(ex.store)}[cid]
    assert c["state"] == "failed" and "left" in c["note"]
    assert "p1" not in machines.by_name or machines.by_name["p1"].started == []  # its job never ran
    clock.advance(2 * HOUR)
    ex.tick()
    assert {c["id"]: c for c in egg.contracts(ex.store)}[cid]["escrow"] == "refunded"
    (p1,) = [p for p in egg.reliability(ex.egg, clock()) if p["provider"] == "p1"]
    assert (p1["prices"], p1["left_t"], p1["completed"], p1["settled"], p1["reliability"]) == (None, 60, 0, 1, 1 / 3)
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def test_price_tables_keep_their_horizon_over_many_periods_and_awards_match_an_untrimmed_book(tmp_path):
    """Past slot columns are dropped as the (injected) clock passes them: over 120 slots the market's
    tables stay ``buckets x H`` columns from the current slot, every recorded table has H columns, and
    the awards equal those of a plain reference: a library market whose book holds every slot of the
    run (no column ever passes out of it), given the same tables padded with ``+inf`` and the same
    bids. Tables price an absolute slot ``s`` at ``(bucket + 1) * (1 + s % 3)``, posted every slot
    (a column is priced while it is unlocked and never changes after)."""
    from marketsched.mechanisms.online.egg import BidBatch

    H, periods = 8, 120
    cfg = egg.default_settings(patience_slots=3, horizon_slots=H, edges=[[0, 2, 4, 8]], runtime_dim=None)
    ex, clock, machines = egg_exchange(tmp_path / "x.db", cfg=cfg, providers=("p1", "p2"))
    ex.deposit("u1", 10_000)
    ref_cfg = {**cfg, "horizon_slots": periods + 2 * H}
    ref = egg._geometry(ref_cfg, HOUR, 2, 0.0)
    rng = np.random.default_rng(11)
    awards, want = [], []
    for period in range(periods):
        clock.advance(period * HOUR + float(rng.uniform(0, 0.5 * HOUR)) - clock())
        for k, p in enumerate(("p1", "p2")):
            slots = period + np.arange(H)
            table = (np.arange(3)[:, None] + 1.0) * (1 + (slots + k) % 3)[None, :]
            act(ex, egg.post_prices, p, table.tolist())
            ref.advance(clock())
            padded = np.full((3, ref_cfg["horizon_slots"]), np.inf)
            padded[:, :H] = table
            egg.first_table(ref.book, k, padded) if period == 0 else ref.update_prices(k, padded)
        body = {"description": [float(rng.choice([1, 3, 6]))], "value": float(rng.integers(3, 12)),
                "deadline": float(rng.choice([1, 2, 3])) * HOUR}
        got = bid(ex, "u1", **body)
        awards.append((got.get("provider"), got.get("slot"), got.get("tau"), got.get("price")))
        data = {k: v for k, v in egg.check_bid({**body, "command": "true"}, 1).items()
                if k in ("description", "until", "values", "value_end", "min_reliability")}
        out, _ = ref.submit(BidBatch.from_bids([egg.library_bid(data, clock())], clock(), 2))
        want.append((("p1", "p2")[int(out.provider[0])], int(out.slot[0]), float(out.completion[0]),
                     float(out.price[0])) if out.scheduled[0] else (None, None, None, None))
        market = ex.egg.sync()
        assert market.book.prices.shape == (2, 3, H) and market.book.base == period
        ex.tick()
        for backend in machines.by_name.values():
            for cid in list(backend.live):
                backend.exit(cid, 0)
    assert awards == want and sum(a[0] is not None for a in awards) > periods // 2
    widths = {len(json.loads(d)["prices"][0]) for (d,) in ex.store.rows(
        "SELECT data FROM ex_egg_events WHERE kind = 'prices'")}
    assert widths == {H}
    assert egg.replay(ex.store) == egg.recorded(ex.store)


def test_an_exchange_down_for_some_slots_drops_the_passed_columns_and_the_new_near_ones_stay_unoffered(tmp_path):
    """Inactive periods: the exchange is down for 10 slots (more than the table's 8 columns). At its
    first event back the book rolls: the passed columns are dropped, the columns that entered meanwhile
    are not offered (``+inf``), and those inside the patience window (3 slots) stay so, because
    definition 6 forbids lowering them (Kang & Parkes 2007, section 2.4): a table pricing them is
    refused naming those cells; a bid (its deadline reaches at most the patience bound) finds no
    provider until the first column priced after the restart is within reach, and is awarded there. A contract due while the exchange was down
    lapsed (refunded, no reliability change). The replay agrees."""
    H = 8
    cfg = egg.default_settings(patience_slots=3, horizon_slots=H, edges=[[0, 2, 4, 8]], runtime_dim=None)
    ex, clock, _ = egg_exchange(tmp_path / "x.db", cfg=cfg)
    ex.deposit("u1", 100)
    flat = np.tile([[1.0], [2.0], [3.0]], (1, H))
    act(ex, egg.post_prices, "p1", flat.tolist())
    first = bid(ex, "u1", value=5, deadline=2 * HOUR)["contract"]
    clock.advance(10 * HOUR + 60)  # down: no tick, no event for 10 slots
    ex.tick()
    c = egg.contracts(ex.store)[0]
    assert (c["id"], c["state"], c["escrow"]) == (first, "lapsed", "refunded")
    (p,) = egg.reliability(ex.egg, clock())
    assert p["base_slot"] == 10 and p["prices"] == [[None] * H] * 3 and p["settled"] == 0
    with pytest.raises(ValueError, match=r"12 cell\(s\)") as e:
        act(ex, egg.post_prices, "p1", flat.tolist())
    assert str(e.value).count("def6(2) no decrease inside the patience window") == 12
    assert "slot 10" in str(e.value) and "slot 13" in str(e.value) and "slot 14" not in str(e.value)
    later = flat.copy()
    later[:, :4] = np.inf  # the four locked columns (slots 10-13) left unoffered: admissible
    act(ex, egg.post_prices, "p1", egg.table_json(later))
    # a bid's deadline reaches at most the patience bound: all inside the unoffered columns
    assert bid(ex, "u1", value=5, deadline=3 * HOUR)["scheduled"] is False
    clock.advance(HOUR)  # one slot later the first priced column is within reach
    got = bid(ex, "u1", value=5, deadline=3 * HOUR)
    assert (got["provider"], got["slot"], got["tau"], got["price"]) == ("p1", 14, 14 * HOUR, 2.0)
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()
