"""The day-ahead auction on Slurm: a day of bids cleared into Slurm reservations (scontrol create
reservation) at the library's Clarke prices, losers pay nothing, and a winner's job runs inside
its reservation (Slurm starts it there, sacct records it). Runs when Slurm answers; with
MARKETSCHED_SLURM=1 a missing cluster fails.

Slurm's reservations are in wall time, so these tests run on the wall clock; what they check
about times is ordered by causality (Slurm does not start a job before its reservation, rounded
down to its whole seconds; the market does not cancel a job before its slot ends on the market's
clock), not by how fast a possibly busy machine answers. The end of a slot is reached by moving
the market's clock ahead (a wall clock plus a shift), not by waiting a minute.
"""

import time

import numpy as np
import pytest

from live_helpers import wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dayahead import ESCROW, DayAhead, config_from_clock
from marketsched.mechanisms.clearing.dpgva import DPGVA
from marketsched.platform.ledger import MICRO
from marketsched.platform.slurm import parse_scontrol, run

HANG = 300.0  # a guard against a hang, not a timing claim


class ShiftedClock:
    """Market time: wall-clock seconds since ``epoch`` plus ``shift``, which a test increases to
    move the market ahead of the wall clock (Slurm's reservations stay where they are)."""

    def __init__(self):
        self.epoch = time.time()
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() - self.epoch + self.shift


def stamp_written(path):
    """The job's ``date > path`` has written (the shell creates the file empty first)."""
    return path.exists() and path.read_text().strip() != ""


def cleared(da):
    """Round 0 has been cleared (showres reads under the broker's lock: never half a round)."""
    return da.showres("admin", True)["rounds"][0]["cleared_t"] is not None


def reservations():
    out = run(["scontrol", "-o", "show", "reservation"])
    if "No reservations" in out:
        return {}
    return {d["ReservationName"]: d for d in map(parse_scontrol, out.splitlines()) if d}


def test_a_day_cleared_into_slurm_reservations_and_a_job_runs_inside_its_own(cluster, tmp_path):
    b = Broker(tmp_path / "market", MarketConfig(executor="slurm", charge_interval=0.5, single_user=True)).start()
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
        assert wait_for(lambda: cleared(da), HANG), da.last_error
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
        # (the slot is a minute of wall time: Slurm must start the 1 s job within it)
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "completed", HANG), (
            da.bid(x["id"]), da.last_error, run(["scontrol", "-o", "show", "job", str(sid)]),
            run(["scontrol", "-o", "show", "reservation"]), time.time())
        t0, t1 = (float((tmp_path / f"stamp.{k}").read_text()) for k in (0, 1))
        assert b.epoch + x["start_t"] - 1.0 <= t0 and t1 <= b.epoch + x["end_t"] + 1.0
        # Slurm's accounting (sacct, written by slurmdbd) follows the controller with a delay
        assert wait_for(lambda: (b.executor.accounting(slurm_id=sid) or {}).get("state") == "COMPLETED", HANG), \
            b.executor.accounting(slurm_id=sid)
        assert b.executor.accounting(slurm_id=sid)["start"] >= int(b.epoch + x["start_t"]) - 1
    finally:
        names = [x["reservation"] for x in da.bids() if x["reservation"]]
        da.stop(cancel=True)
        b.stop(kill_jobs=True)
    assert not set(names) & set(reservations())  # no reservation left behind


def test_a_job_still_running_when_its_reservation_ends_is_stopped_by_the_market(cluster, tmp_path):
    # one bid, one 60 s slot, a command that would run 10 minutes: the reservation is created
    # with OVERLAP, so Slurm starts the job even when its pass comes late (its whole-minute time
    # limit then reaches past the slot), and the service cancels it when the slot ends on the
    # market's clock (moved there by the test once the job runs)
    clock = ShiftedClock()
    b = Broker(tmp_path / "market", MarketConfig(executor="slurm", charge_interval=0.5, single_user=True), clock=clock)
    clock.epoch = b.epoch  # market time is wall time since the market's epoch (plus the shift)
    b.start()
    b.ensure_admin()
    cfg = config_from_clock(b._t, clear_in=1.0, lead=2.0, horizon=120.0, granularity=60.0, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    stamp = tmp_path / "stamp"
    try:
        b.add_user(True, "u", 100)
        # a neighbour's reservation right after ours: the case where a late start used to be refused
        # stamp.1 only if the 10-minute sleep ran to its end (`&&`: Slurm's cancel signals the job's
        # processes one after the other, so the shell may run one more command after its sleep is
        # killed and before its own signal arrives; `;` made the test depend on that order)
        da.place_bid("u", 60.0, 60.0, 50.0, command=f"date +%s.%N > {stamp}.0; sleep 600 && touch {stamp}.1")
        b.add_user(True, "v", 100)
        da.place_bid("v", 60.0, 120.0, 10.0)
        da.start(0.1)
        assert wait_for(lambda: cleared(da), HANG), da.last_error
        x, y = da.bids()
        assert x["state"] == y["state"] == "won" and x["end_t"] == y["start_t"]
        assert "OVERLAP" in reservations()[x["reservation"]]["Flags"]
        sid = int(x["job_ref"][6:])
        # (the slot is a minute of wall time: Slurm must start the job within it)
        assert wait_for(lambda: stamp_written(tmp_path / "stamp.0") and da.bid(x["id"])["job_state"] == "running",
                        HANG), (da.bid(x["id"]), da.last_error, run(["scontrol", "-o", "show", "job", str(sid)]))
        t0 = float((tmp_path / "stamp.0").read_text())
        assert b.epoch + x["start_t"] - 1.0 <= t0  # not before its reservation (Slurm: whole seconds)
        with b.lock:
            assert b._now() < x["end_t"] and da.bid(x["id"])["job_state"] == "running"  # inside its slot
            jump_wall = time.time()
            clock.shift += x["end_t"] - b._now()  # the market's clock reaches the end of the slot
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "killed", HANG), (
            da.bid(x["id"]), da.last_error, run(["scontrol", "-o", "show", "job", str(sid)]))
        assert "reservation ended" in da.bid(x["id"])["note"]
        assert wait_for(lambda: (b.executor.accounting(slurm_id=sid) or {}).get("state") == "CANCELLED", HANG)
        # Slurm recorded the end after the market's slot ended (whole seconds), not before
        assert int(jump_wall) <= b.executor.accounting(slurm_id=sid)["end"] <= time.time()
        assert not (tmp_path / "stamp.1").exists()
    finally:
        da.stop(cancel=True)
        b.stop(kill_jobs=True)


def test_a_reservations_job_runs_as_its_owners_account_on_slurm(cluster, accounts, open_dir):
    """Multi-user market on Slurm: the reservation admits the bid owner's account and the
    winner's job is submitted as it (sbatch --uid/--gid): Slurm's UserId is the account."""
    import pwd

    b = Broker(open_dir / "market", MarketConfig(executor="slurm", charge_interval=0.5, single_user=False)).start()
    b.ensure_admin()
    b.add_user(True, "alice", 100, unix=accounts[0])
    cfg = config_from_clock(b._t, clear_in=2.0, lead=3.0, horizon=120.0, granularity=60.0, repeat=0, capacity=1)
    da = DayAhead(b, cfg)
    b.dayahead = da
    try:
        x = da.place_bid("alice", 60, 60, 10, command="id -un")
        da.start(0.1)
        assert wait_for(lambda: da.bid(x["id"])["state"] == "won", HANG), da.bid(x["id"])
        x = da.bid(x["id"])
        assert f"Users={'root,' + accounts[0] if 'root' < accounts[0] else accounts[0] + ',root'}" in \
            run(["scontrol", "-o", "show", "reservation", x["reservation"]])
        sid = int(x["job_ref"].split(":")[1])
        info = parse_scontrol(run(["scontrol", "-o", "show", "job", str(sid)]))
        assert info["UserId"] == f"{accounts[0]}({pwd.getpwnam(accounts[0]).pw_uid})"
        assert wait_for(lambda: da.bid(x["id"])["job_state"] == "completed", HANG), (da.bid(x["id"]), da.last_error)
        assert (da.root / f"job-{x['id']}" / "stdout").read_text().strip() == accounts[0]
    finally:
        da.stop(cancel=True)
        b.stop(kill_jobs=True)
