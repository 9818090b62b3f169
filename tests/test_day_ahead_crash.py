"""The day-ahead service killed (kill -9) inside a clearing on Slurm, after Slurm made a winner's
reservation (and maybe submitted its job) and before the clearing's commit: the restarted
service clears the round again, once, with one reservation and one job per winner. No
processes and no Slurm: a scripted executor and a fake of Slurm's commands; market time is a
fake clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import marketsched.platform.slurm as slurm
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.dayahead import ESCROW, DayAhead, DayAheadConfig
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO
from test_live_exactly_once import Crash, FakeOS, ScriptedExecutor


@dataclass
class SlurmLike(ScriptedExecutor):
    """The scripted executor as the broker sees a Slurm one (it orders a queue: ``arrange``)."""

    partition: str | None = None

    def arrange(self, queue):
        pass

    def _run(self, args, timeout=30.0, input=None, env=None):
        return slurm.run(args, timeout, input, env)


class FakeSlurm:
    """Slurm's reservations and jobs as its commands change them; ``crash_at``: the command
    (``"scontrol"`` after a reservation is made, ``"sbatch"`` after a job is submitted) after
    which the service dies, once."""

    def __init__(self, crash_at: str | None):
        self.crash_at = crash_at
        self.crash_before: str | None = None  # the command before which the service dies, once
        self.reservations: set[str] = set()
        self.jobs: dict[int, list] = {}  # Slurm id -> [name, state]

    def __call__(self, args, timeout=30.0, input=None, env=None):
        if self.crash_before == args[0]:
            self.crash_before = None
            raise Crash
        if args[:3] == ["scontrol", "create", "reservation"]:
            name = args[3].split("=", 1)[1]
            if name in self.reservations:
                raise slurm.SlurmError(f"`{' '.join(args)}` failed (exit 1): Error creating the reservation: "
                                       "Duplicate reservation name")
            self.reservations.add(name)
            out = f"Reservation created: {name}\n"
        elif args[0] == "sbatch":
            sid = 100 + len(self.jobs)
            self.jobs[sid] = [args[args.index("-J") + 1], "PENDING"]
            out = f"{sid}\n"
        elif args[:4] == ["scontrol", "-o", "show", "job"]:
            name, state = self.jobs[int(args[4])]
            out = f"JobId={args[4]} JobName={name} JobState={state}\n"
        elif args[0] == "scancel" and args[1].isdigit():
            self.jobs[int(args[1])][1] = "CANCELLED"
            out = ""
        elif args[0] == "scancel" and args[1] == "-n":
            for job in self.jobs.values():
                if job[0] == args[2]:
                    job[1] = "CANCELLED"
            out = ""
        else:
            raise AssertionError(f"unexpected Slurm command {args}")
        if self.crash_at == args[0]:
            self.crash_at = None
            raise Crash
        return out


def day(tmp_path, clock, machine):
    """A broker on the scripted executor with the day-ahead service of one round (clearing at
    10 s for the period from 100 s), on the same data at each call (a restart)."""
    config = DayAheadConfig(clear_at=10.0, period_start=100.0, horizon=600.0, granularity=60.0, repeat=0)
    b = Broker(tmp_path / "m", MarketConfig(single_user=True), clock=clock,
               executor=SlurmLike(tmp_path / "m" / "jobs", os=machine))
    return b, DayAhead(b, config)


def one_bid(tmp_path, clock, machine):
    """:func:`day` with user ``u`` (50 deposited) and their bid for 60 s with a command, its
    round due: the broker, the service and the bid."""
    b, da = day(tmp_path, clock, machine)
    b.add_user(True, "u", deposit=50.0)
    x = da.place_bid("u", length=60, deadline=300, value=20.0, command="echo reserved")
    clock.set(da.config.clear_at)
    return b, da, x


@pytest.mark.parametrize("dies_after", ["scontrol", "sbatch"])
def test_a_clearing_killed_after_slurm_acted_clears_again_once(tmp_path, monkeypatch, dies_after):
    """Killed after Slurm made the winner's reservation (``scontrol``) or also submitted its job
    (``sbatch``), before the clearing's commit: the restarted service clears the round (it
    failed at every step before, on Slurm's "Duplicate reservation name", so the escrow never
    moved), keeps that reservation, cancels the unrecorded job and records one job; the escrow
    is settled once, the books exact."""
    fake = FakeSlurm(crash_at=dies_after)
    monkeypatch.setattr(slurm, "run", fake)
    clock, machine = FakeClock(0.0), FakeOS()
    b, da, x = one_bid(tmp_path, clock, machine)
    with pytest.raises(Crash):
        da.tick()  # the round clears: Slurm acts, the service dies before its commit
    b.store.close()
    b, da = day(tmp_path, clock, machine)  # started again on the same data
    da.tick()
    got = da.bid(x["id"])
    assert got["state"] == "won" and got["reservation"] in fake.reservations
    active = [sid for sid, (name, state) in fake.jobs.items() if state == "PENDING"]
    assert [f"slurm:{sid}" for sid in active] == [got["job_ref"]]  # one job: the recorded one
    assert all(name == got["reservation"] for name, _ in fake.jobs.values())
    books = b.store.check_books()
    assert b.store.balance(ESCROW) == 0  # the escrow settled once: price paid, the rest back
    assert b.store.balance("user:u") == 50 * MICRO - got["price"]
    assert books["revenue"] == got["price"]
    b.store.close()


@pytest.mark.parametrize("dies", ["after the cancel", "before the cancel"])
def test_a_slots_end_cancelled_before_a_restart_is_the_markets_stop(tmp_path, monkeypatch, dies):
    """A winner's Slurm job still runs when its slot ends: the service cancels it (``scancel``)
    and is killed before it reads the job's end (``after the cancel``), or just before the
    cancel (``before the cancel``). The restarted service reads the end as the market's own stop
    at the slot's end (``killed``, "reservation ended"), as the uninterrupted one does, never as
    someone else's cancel ("slurm: CANCELLED"); a job still running is cancelled then."""
    fake = FakeSlurm(crash_at=None)
    monkeypatch.setattr(slurm, "run", fake)
    clock, machine = FakeClock(0.0), FakeOS()
    b, da, x = one_bid(tmp_path, clock, machine)
    da.tick()
    x = da.bid(x["id"])
    sid = int(x["job_ref"][6:])
    fake.jobs[sid][1] = "RUNNING"
    clock.set(x["start_t"] + 1)
    da.tick()
    assert da.bid(x["id"])["job_state"] == "running"
    clock.set(x["end_t"])
    if dies == "after the cancel":
        fake.crash_at = "scancel"
    else:
        fake.crash_before = "scancel"
    with pytest.raises(Crash):
        da.tick()
    b.store.close()
    b, da = day(tmp_path, clock, machine)
    da.tick()  # before the cancel: cancelled now
    da.tick()
    got = da.bid(x["id"])
    assert fake.jobs[sid][1] == "CANCELLED"
    assert (got["job_state"], got["note"]) == ("killed", "reservation ended")
    b.store.close()
