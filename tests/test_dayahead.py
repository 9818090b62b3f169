"""The day-ahead reservation auction as a service (Mutz 2008, ch. 5 and 7): a day of sealed bids
cleared at the clearing time, Clarke prices equal to the library's, losers pay nothing, money
in escrow returns, a winner's command runs inside its reservation (held slots on the local
executor; Slurm reservations in tests/test_dayahead_slurm.py); placebid and showres commands."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from live_helpers import wait_for
from marketsched.live.api import MarketServer
from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.live.cli import market as market_cli
from marketsched.live.dayahead import ESCROW, DayAhead, DayAheadConfig, config_from_clock, daily_config
from marketsched.live.ledger import MICRO
from marketsched.mechanisms.clearing.dpgva import DPGVA
from marketsched.mechanisms.clearing.relaxed_dpgva import RelaxedDPGVA


@pytest.fixture
def broker(tmp_path):
    made = []

    def make(**cfg):
        b = Broker(tmp_path / "market", MarketConfig(slots=1, charge_interval=0.2, **cfg)).start()
        b.ensure_admin()
        made.append(b)
        return b

    yield make
    for b in made:
        if b.dayahead is not None:
            b.dayahead.stop(cancel=True)
        if not b._stopping:
            b.stop(kill_jobs=True)


def random_day(rng, m, horizon, g):
    length = rng.integers(1, 4, m) * g
    deadline = np.array([rng.integers(int(l / g), int(horizon / g) + 1) * g for l in length], dtype=float)
    value = np.round(rng.uniform(1, 50, m), 3)
    return length.astype(float), deadline, value


def test_a_day_of_bids_cleared_with_the_librarys_clarke_prices(broker, tmp_path):
    b = broker()
    g, horizon = 1.0, 14.0
    cfg = config_from_clock(b._t, clear_in=2.5, lead=0.5, horizon=horizon, granularity=g, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    da.start(0.05)
    rng = np.random.default_rng(7)
    m = 8
    length, deadline, value = random_day(rng, m, horizon, g)
    # bid 0 is sure to win early: short, early deadline, the highest value; it runs a command
    length[0], deadline[0], value[0] = 2.0, 2.0, 500.0
    stamp = tmp_path / "stamp"
    cmd = f"date +%s.%N > {stamp}.0; sleep 1; date +%s.%N > {stamp}.1"
    ids = []
    for i in range(m):
        b.add_user(True, f"u{i}", 1000)
        x = da.place_bid(f"u{i}", length[i], deadline[i], value[i], command=cmd if i == 0 else None)
        assert x["state"] == "sealed" and x["round"] == 0
        assert b.balance[f"u{i}"] == (1000 - value[i]) * MICRO  # the maximum price is in escrow
        ids.append(x["id"])
    assert b.store.balances()[ESCROW] == round(value.sum() * MICRO)
    assert wait_for(lambda: da.bids()[0]["state"] != "sealed", 10)
    out = DPGVA(g, horizon).clear(length, deadline, value)  # the library on the same bids
    bids = da.bids()
    _, period_start = da.round_times(0)
    for i, x in enumerate(bids):
        won = out.start[i] >= 0
        assert x["state"] == ("won" if won else "lost")
        assert x["library_price"] == pytest.approx(out.payments[i], abs=1e-12)
        assert x["price"] == pytest.approx(out.payments[i], abs=1e-6)  # Clarke price charged, to a micro-unit
        bal = b.balance[f"u{i}"] / MICRO
        if won:
            assert x["start_t"] == pytest.approx(period_start + out.start[i])
            assert x["end_t"] - x["start_t"] == pytest.approx(np.ceil(length[i] / g) * g)
            assert 0 <= x["price"] <= value[i]
            assert bal == pytest.approx(1000 - x["price"], abs=1e-6)
        else:
            assert x["price"] == 0 and bal == 1000  # losers pay nothing, to the micro-unit
    assert out.start[0] == 0 and (out.start < 0).any()  # the day has winners and losers
    books = b.store.check_books()
    assert b.store.balances()[ESCROW] == 0
    assert books["revenue"] == sum(round(x["price"] * MICRO) for x in bids)
    assert books["users"] + books["revenue"] == books["deposits"]
    # reservations never overlap (DPGVA: every job uses the whole machine)
    won = sorted((x["start_t"], x["end_t"]) for x in bids if x["state"] == "won")
    assert all(e <= s2 + 1e-9 for (_, e), (s2, _) in zip(won, won[1:]))
    # the winner's command ran inside its reservation (held slot of the local executor)
    assert wait_for(lambda: da.bid(ids[0])["job_state"] == "completed", 15), da.bid(ids[0])
    x = da.bid(ids[0])
    t0, t1 = (float((tmp_path / f"stamp.{k}").read_text()) for k in (0, 1))
    assert b.epoch + x["start_t"] - 0.05 <= t0 and t1 <= b.epoch + x["end_t"] + 0.3
    assert x["exit_code"] == 0
    with pytest.raises(MarketError, match="closed"):
        da.place_bid("u1", 1, 2, 1)


def test_relaxed_auction_charges_library_prices_clipped_to_individual_rationality(broker):
    b = broker()
    g, horizon, cap = 1.0, 10.0, 4
    cfg = config_from_clock(b._t, clear_in=1.5, lead=0.5, horizon=horizon, granularity=g, repeat=0,
                            mechanism="relaxed", capacity=cap, depth=20, seed=3)
    da = DayAhead(b, cfg)
    b.dayahead = da
    rng = np.random.default_rng(11)
    m = 10
    length, deadline, value = random_day(rng, m, horizon, g)
    nodes = rng.integers(1, cap + 1, m)
    for i in range(m):
        b.add_user(True, f"u{i}", 100)
        da.place_bid(f"u{i}", length[i], deadline[i], value[i], nodes=int(nodes[i]))
    with pytest.raises(MarketError, match="nodes 5 is more"):
        da.place_bid("u0", 1, 2, 1, nodes=5)
    da.start(0.05)
    assert wait_for(lambda: da.bids()[0]["state"] != "sealed", 10)
    out = RelaxedDPGVA(cap, 20, g, horizon).clear(length, deadline, value, nodes, rng=np.random.default_rng([3, 0]))
    for i, x in enumerate(da.bids()):
        assert (x["state"] == "won") == (out.start[i] >= 0)
        assert x["library_price"] == pytest.approx(out.payments[i])
        expect = min(max(out.payments[i], 0), value[i]) if out.start[i] >= 0 else 0.0
        assert x["price"] == pytest.approx(expect, abs=1e-6)
        assert b.balance[f"u{i}"] / MICRO == pytest.approx(100 - x["price"], abs=1e-6)
    # at every slot the winners' nodes fit the capacity
    use = np.zeros(int(horizon))
    for i, x in enumerate(da.bids()):
        if x["state"] == "won":
            s = int(out.start[i])
            use[s:s + int(length[i])] += nodes[i]
    assert use.max() <= cap
    books = b.store.check_books()
    assert b.store.balances()[ESCROW] == 0 and books["users"] + books["revenue"] == books["deposits"]


def test_bad_bids_change_nothing_and_escrow_needs_money(broker):
    b = broker()
    cfg = config_from_clock(b._t, clear_in=60, lead=0, horizon=100, granularity=10, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.add_user(True, "u", 5)
    for args, msg in [((0, 10, 1), "length must be a positive"), ((20, 10, 1), "before the length"),
                      ((10, 200, 1), "after the end"), ((15, 15, 1), "does not fit"),
                      ((10, 20, 0), "maximum price must be a positive"), ((10, 20, float("nan")), "finite"),
                      ((10, 20, 6), "balance too low")]:
        with pytest.raises(MarketError, match=msg):
            da.place_bid("u", *args)
    with pytest.raises(MarketError, match="whole machine"):
        da.place_bid("u", 10, 20, 1, nodes=2)
    with pytest.raises(MarketError, match="unknown user"):
        da.place_bid("nobody", 10, 20, 1)
    assert da.bids() == [] and b.balance["u"] == 5 * MICRO
    with pytest.raises(ValueError, match="period must start"):
        DayAheadConfig(clear_at=10, period_start=5).check()
    with pytest.raises(ValueError, match="HH:MM"):
        daily_config(b.epoch, b._t, "25:00")
    d = daily_config(b.epoch, b._t, "18:00")
    assert 0 < d.clear_at - b._t <= 86400 and d.period_start > d.clear_at and d.horizon == 86400


def test_placebid_and_showres_commands(broker, tmp_path):
    b = broker()
    da = DayAhead(b, config_from_clock(b._t, clear_in=1.0, lead=0.5, horizon=20, granularity=1, repeat=0))
    b.dayahead = da
    server = MarketServer(b, "127.0.0.1", 0)
    server.serve_in_thread()
    try:
        alice = b.add_user(True, "alice", 50)["token"]
        runner = CliRunner()
        env = {"MARKETSCHED_URL": server.url, "MARKETSCHED_TOKEN": alice}
        r = runner.invoke(market_cli, ["placebid", "--length", "3", "--deadline", "10", "--value", "20", "--",
                                       "echo hi"], env=env)
        assert r.exit_code == 0, r.output
        assert "sealed for round 0" in r.output
        r = runner.invoke(market_cli, ["placebid", "--length", "3", "--deadline", "10", "--value", "90"], env=env)
        assert r.exit_code == 1 and "balance too low" in r.output
        da.start(0.05)
        assert wait_for(lambda: da.bids()[0]["state"] == "won", 10)
        r = runner.invoke(market_cli, ["showres"], env=env)
        assert r.exit_code == 0 and "won" in r.output and "local:ms-local-da1" in r.output, r.output
        r = runner.invoke(market_cli, ["showres", "--json"], env=env)
        res = json.loads(r.output)
        assert res["bids"][0]["price"] == 0  # alone in the auction: its Clarke price is 0
        assert res["next"] is None
    finally:
        server.shutdown()
