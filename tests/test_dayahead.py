"""The day-ahead reservation auction as a service (Mutz 2008, ch. 5 and 7): a day of sealed bids
cleared at the clearing time, Clarke prices equal to the library's, losers pay nothing, money
in escrow returns, a winner's command runs inside its reservation (held slots on the local
executor; Slurm reservations in tests/test_dayahead_slurm.py); placebid and showres commands.

Market time is a FakeClock the tests move, and they run the service's tick themselves: when a
round clears and when a reservation's command starts or is stopped is checked against that
clock, never against the wall clock of a possibly busy machine (the commands themselves are
real processes; waiting for one to end has only a hang guard).
"""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from live_helpers import wait_for
from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.live.cli import market as market_cli
from marketsched.live.dayahead import ESCROW, DayAhead, DayAheadConfig, config_from_clock, daily_config
from marketsched.live.server import MarketServer
from marketsched.mechanisms.clearing.dpgva import DPGVA
from marketsched.mechanisms.clearing.relaxed_dpgva import RelaxedDPGVA
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO

HANG = 300.0  # a guard against a hang, not a timing claim


@pytest.fixture
def broker(tmp_path):
    made = []

    def make(clock=None, **cfg):
        b = Broker(tmp_path / "market", MarketConfig(slots=1, charge_interval=0.2, single_user=True, **cfg), clock=clock).start()
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


def tick_until(da, bid_id, state):
    """Run the service's tick (market clock standing still) until bid ``bid_id``'s job is in
    ``state``: a real command is running meanwhile."""
    def ticked():
        da.tick()
        return da.bid(bid_id)["job_state"] == state
    assert wait_for(ticked, HANG), da.bid(bid_id)


def test_a_day_of_bids_cleared_with_the_librarys_clarke_prices(broker, tmp_path):
    clock = FakeClock(100.0)
    b = broker(clock)
    g, horizon = 1.0, 14.0
    cfg = config_from_clock(b._t, clear_in=2.5, lead=0.5, horizon=horizon, granularity=g, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da  # not started: the test runs the service's tick itself
    rng = np.random.default_rng(7)
    m = 8
    length, deadline, value = random_day(rng, m, horizon, g)
    # bid 0 is sure to win early: short, early deadline, the highest value; it runs a command
    # that ends by itself; bid 1 (a winner) runs one that outlasts its reservation; bid 7 (a
    # winner) has a command but the market's clock passes its whole reservation between ticks
    length[0], deadline[0], value[0] = 2.0, 2.0, 500.0
    commands = {0: "echo $MARKETSCHED_DAYAHEAD_BID > ran", 1: "sleep 600", 7: "touch ran"}
    ids = []
    for i in range(m):
        b.add_user(True, f"u{i}", 1000)
        x = da.place_bid(f"u{i}", length[i], deadline[i], value[i], command=commands.get(i))
        assert x["state"] == "sealed" and x["round"] == 0
        assert b.balance[f"u{i}"] == (1000 - value[i]) * MICRO  # the maximum price is in escrow
        ids.append(x["id"])
    assert b.store.balances()[ESCROW] == round(value.sum() * MICRO)
    clock.set(cfg.clear_at - 1e-6)
    da.tick()
    assert all(x["state"] == "sealed" for x in da.bids())  # not before the clearing time
    clock.set(cfg.clear_at)
    da.tick()
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
    assert out.start[1] >= 0 and out.start[7] > out.start[1]  # the other two commands' bids won
    books = b.store.check_books()
    assert b.store.balances()[ESCROW] == 0
    assert books["revenue"] == sum(round(x["price"] * MICRO) for x in bids)
    assert books["users"] + books["revenue"] == books["deposits"]
    # reservations never overlap (DPGVA: every job uses the whole machine)
    won = sorted((x["start_t"], x["end_t"]) for x in bids if x["state"] == "won")
    assert all(e <= s2 + 1e-9 for (_, e), (s2, _) in zip(won, won[1:]))
    # the winners' commands run inside their reservations (held slots of the local executor)
    x0, x1, x7 = (da.bid(ids[i]) for i in (0, 1, 7))
    clock.set(x0["start_t"] - 1e-6)
    da.tick()
    assert [da.bid(ids[i])["job_state"] for i in (0, 1, 7)] == ["scheduled"] * 3  # not before its start
    assert ids[0] not in da.local.procs
    clock.set(x0["start_t"])
    da.tick()
    assert da.bid(ids[0])["job_state"] == "running" and ids[0] in da.local.procs
    tick_until(da, ids[0], "completed")  # ended by itself, market time still inside its slot
    x = da.bid(ids[0])
    assert x["exit_code"] == 0 and "reservation" not in x["note"]
    assert (da.local.workdir(ids[0]) / "ran").read_text().split() == [str(ids[0])]
    clock.set(x1["start_t"])
    da.tick()
    p1 = da.local.procs[ids[1]]
    assert da.bid(ids[1])["job_state"] == "running"
    clock.set(x1["end_t"] - 1e-6)
    da.tick()
    assert da.bid(ids[1])["job_state"] == "running"  # still its slot
    clock.set(x1["end_t"])
    da.tick()  # its slot is over: the service kills it
    x = da.bid(ids[1])
    assert x["job_state"] == "killed" and "reservation ended" in x["note"]
    assert ids[1] not in da.local.procs and p1.popen.poll() is not None
    clock.set(x7["end_t"])  # bid 7's whole reservation passed between two ticks: never started
    da.tick()
    x = da.bid(ids[7])
    assert x["job_state"] == "failed" and "reservation passed unused" in x["note"]
    assert not (da.local.workdir(ids[7]) / "ran").exists()
    with pytest.raises(MarketError, match="closed"):
        da.place_bid("u1", 1, 2, 1)


def test_relaxed_auction_charges_library_prices_clipped_to_individual_rationality(broker):
    clock = FakeClock()
    b = broker(clock)
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
    clock.set(cfg.clear_at)
    da.tick()
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
    clock = FakeClock()
    b = broker(clock)
    da = DayAhead(b, config_from_clock(b._t, clear_in=1.0, lead=0.5, horizon=20, granularity=1, repeat=0))
    b.dayahead = da
    server = MarketServer(b, "127.0.0.1", 0)
    server.serve_in_thread()
    try:
        alice = b.add_user(True, "alice", 50)["token"]
        runner = CliRunner()
        env = {"MARKETSCHED_URL": server.url, "MARKETSCHED_TOKEN": alice, "MARKETSCHED_DATA": str(server.identity_dir)}
        r = runner.invoke(market_cli, ["placebid", "--length", "3", "--deadline", "10", "--value", "20", "--",
                                       "echo hi"], env=env)
        assert r.exit_code == 0, r.output
        assert "sealed for round 0" in r.output
        r = runner.invoke(market_cli, ["placebid", "--length", "3", "--deadline", "10", "--value", "90"], env=env)
        assert r.exit_code == 1 and "balance too low" in r.output
        da.start(0.05)  # the service's own thread, as `market serve --dayahead` runs it
        clock.set(da.config.clear_at)
        assert wait_for(lambda: da.bids()[0]["state"] == "won", HANG)
        r = runner.invoke(market_cli, ["showres"], env=env)
        assert r.exit_code == 0 and "won" in r.output and "local:ms-local-da1" in r.output, r.output
        r = runner.invoke(market_cli, ["showres", "--json"], env=env)
        res = json.loads(r.output)
        assert res["bids"][0]["price"] == 0  # alone in the auction: its Clarke price is 0
        assert res["next"] is None
    finally:
        server.shutdown()


def test_a_reservations_job_runs_as_its_owners_unix_account_in_a_cgroup(accounts, open_dir):
    """Multi-user market: the day-ahead service starts a winner's command like a spot job (the
    same launcher and cgroups), as the bid owner's account."""
    from live_helpers import require_cgroups
    from marketsched.platform.jobfiles import read_tail

    b = Broker(open_dir / "market", MarketConfig(slots=1, charge_interval=0.2, single_user=False)).start()
    try:
        b.ensure_admin()
        b.add_user(True, "alice", 100, unix=accounts[0])
        da = DayAhead(b, config_from_clock(b._t, clear_in=1.0, lead=0.5, horizon=10, granularity=1, repeat=0))
        b.dayahead = da
        require_cgroups(da.local)
        da.start(0.05)
        x = da.place_bid("alice", 2, 3, 10, command="id -un; cat /proc/self/cgroup")
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "completed", HANG), da.bid(x["id"])
        out = read_tail(da.root, f"job-{x['id']}", "stdout", 4000).splitlines()
        assert out[0] == accounts[0]
        assert any(f"/{da.local.name}/job-{x['id']}" in line for line in out[1:]), out
    finally:
        if b.dayahead is not None:
            b.dayahead.stop(cancel=True)
        b.stop(kill_jobs=True)
