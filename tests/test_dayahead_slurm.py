"""The day-ahead auction on Slurm: a day of bids cleared into Slurm reservations (scontrol create
reservation) at the library's Clarke prices, losers pay nothing, and a winner's job runs inside
its reservation (Slurm starts it there, sacct records it). Runs when Slurm answers; with
MARKETSCHED_SLURM=1 a missing cluster fails."""

import time

import numpy as np
import pytest

from live_helpers import wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dayahead import ESCROW, DayAhead, config_from_clock
from marketsched.live.ledger import MICRO
from marketsched.live.slurm import parse_scontrol, run
from marketsched.mechanisms.clearing.dpgva import DPGVA


def reservations():
    out = run(["scontrol", "-o", "show", "reservation"])
    if "No reservations" in out:
        return {}
    return {d["ReservationName"]: d for d in map(parse_scontrol, out.splitlines()) if d}


def test_a_day_cleared_into_slurm_reservations_and_a_job_runs_inside_its_own(cluster, tmp_path):
    b = Broker(tmp_path / "market", MarketConfig(executor="slurm", charge_interval=0.5)).start()
    b.ensure_admin()
    g, horizon = 60.0, 300.0  # Slurm's time limits are whole minutes: slots of 60 s at least
    cfg = config_from_clock(b._t, clear_in=2.0, lead=3.0, horizon=horizon, granularity=g, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    try:
        # bid 0: short, early, the most valuable: it wins slot 0 and runs a command there
        length = np.array([60.0, 120.0, 180.0, 120.0, 240.0])
        deadline = np.array([60.0, 240.0, 300.0, 240.0, 300.0])
        value = np.array([90.0, 30.0, 25.0, 20.0, 10.0])
        stamp = tmp_path / "stamp"
        cmd = f"date +%s.%N > {stamp}.0; sleep 1; date +%s.%N > {stamp}.1"
        for i in range(len(value)):
            b.add_user(True, f"u{i}", 100)
            da.place_bid(f"u{i}", length[i], deadline[i], value[i], command=cmd if i == 0 else None)
        da.start(0.1)
        assert wait_for(lambda: da.bids()[0]["state"] != "sealed", 15)
        out = DPGVA(g, horizon).clear(length, deadline, value)
        bids = da.bids()
        res = reservations()
        for i, x in enumerate(bids):
            assert (x["state"] == "won") == (out.start[i] >= 0)
            assert x["price"] == pytest.approx(out.payments[i], abs=1e-6)  # the library's Clarke price
            if x["state"] == "won":
                r = res[x["reservation"]]  # a Slurm reservation of the whole node for the slots won
                assert r["StartTime"] == x["start_time"] and r["EndTime"] == x["end_time"]
                assert int(r["CoreCnt"]) >= 1 and "IGNORE_JOBS" in r["Flags"]
                assert b.balance[f"u{i}"] == round((100 - x["price"]) * MICRO)
            else:
                assert x["reservation"] is None and b.balance[f"u{i}"] == 100 * MICRO  # losers pay nothing
        assert (out.start < 0).any() and (out.start >= 0).sum() >= 2
        assert b.store.balances()[ESCROW] == 0
        books = b.store.check_books()
        assert books["users"] + books["revenue"] == books["deposits"]
        # bid 0's job: Slurm starts it in its reservation, not before
        x = bids[0]
        sid = int(x["job_ref"].split(":")[1])
        info = parse_scontrol(run(["scontrol", "-o", "show", "job", str(sid)]))
        assert info["Reservation"] == x["reservation"]
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "completed", 40), (
            da.bid(x["id"]), da.last_error, run(["scontrol", "-o", "show", "job", str(sid)]),
            run(["scontrol", "-o", "show", "reservation"]), time.time())
        t0, t1 = (float((tmp_path / f"stamp.{k}").read_text()) for k in (0, 1))
        assert b.epoch + x["start_t"] - 1.0 <= t0 and t1 <= b.epoch + x["end_t"] + 1.0
        acc = b.executor.accounting(slurm_id=sid)
        assert acc["state"] == "COMPLETED" and acc["start"] >= int(b.epoch + x["start_t"]) - 1
    finally:
        names = [x["reservation"] for x in da.bids() if x["reservation"]]
        da.stop(cancel=True)
        b.stop(kill_jobs=True)
    assert not set(names) & set(reservations())  # no reservation left behind


def test_a_job_still_running_when_its_reservation_ends_is_stopped_by_the_market(cluster, tmp_path):
    # one bid, one 60 s slot, a command that would run 10 minutes: the reservation is created
    # with OVERLAP, so Slurm starts the job even when its pass comes late (its whole-minute time
    # limit then reaches past the slot), and the service cancels it when the slot ends
    b = Broker(tmp_path / "market", MarketConfig(executor="slurm", charge_interval=0.5)).start()
    b.ensure_admin()
    cfg = config_from_clock(b._t, clear_in=1.0, lead=2.0, horizon=120.0, granularity=60.0, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    stamp = tmp_path / "stamp"
    try:
        b.add_user(True, "u", 100)
        # a neighbour's reservation right after ours: the case where a late start used to be refused
        da.place_bid("u", 60.0, 60.0, 50.0, command=f"date +%s.%N > {stamp}.0; sleep 600; touch {stamp}.1")
        b.add_user(True, "v", 100)
        da.place_bid("v", 60.0, 120.0, 10.0)
        da.start(0.1)
        assert wait_for(lambda: da.bids()[0]["state"] != "sealed", 15)
        x, y = da.bids()
        assert x["state"] == y["state"] == "won" and x["end_t"] == y["start_t"]
        assert "OVERLAP" in reservations()[x["reservation"]]["Flags"]
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "killed", 90), (
            da.bid(x["id"]), da.last_error, run(["scontrol", "-o", "show", "job", x["job_ref"][6:]]))
        t0 = float((tmp_path / "stamp.0").read_text())
        assert b.epoch + x["start_t"] - 1.0 <= t0 < b.epoch + x["end_t"]
        assert not (tmp_path / "stamp.1").exists()
        assert "reservation ended" in da.bid(x["id"])["note"]
        sid = int(x["job_ref"][6:])
        assert wait_for(lambda: (b.executor.accounting(slurm_id=sid) or {}).get("state") == "CANCELLED", 10)
        assert b.executor.accounting(slurm_id=sid)["end"] <= b.epoch + x["end_t"] + 2
    finally:
        da.stop(cancel=True)
        b.stop(kill_jobs=True)
