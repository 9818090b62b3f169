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


class LocalMachine(FakeOS):
    """What outlives the service on the local executor: processes, state files (``went``: the
    go was sent) and the exit statuses the jobs' wrappers wrote."""

    def __init__(self):
        super().__init__()
        self.went: set[int] = set()
        self.codes: dict[int, int] = {}


class FakeLocal:
    """The local executor's interface as the day-ahead service uses it, on a
    :class:`LocalMachine`; ``crash``: the action after which the service dies (``"launch"``,
    ``"exits"``, ``"kill"``), once."""

    crash: str | None = None

    def __init__(self, root, machine: LocalMachine, limits=None):
        self.root, self.machine = root, machine
        self.procs: dict[int, int] = {}

    def _maybe_crash(self, what):
        if FakeLocal.crash == what:
            FakeLocal.crash = None
            raise Crash

    def launch(self, key, command, env=None, user=None, record_go=False, **kw):
        self.machine.records[key] = self.machine.alive[key] = self.procs[key] = 1
        if record_go:
            self.machine.went.add(key)
        self.machine.launches.append(key)
        self._maybe_crash("launch")

    def adopt(self, key, *args):
        if key in self.machine.records and key in self.machine.alive:
            self.procs[key] = 1
            return 1
        return None

    def recorded(self, key):
        return (1, 1) if key in self.machine.records else None

    def went(self, key):
        return key in self.machine.went

    def exit_code(self, key):
        return self.machine.codes.get(key)

    def exits(self):
        out = [(k, self.machine.codes[k]) for k in list(self.procs) if k not in self.machine.alive]
        for k, _ in out:
            del self.procs[k]
        if out:
            self._maybe_crash("exits")
        return out

    def kill(self, key):
        self.machine.alive.pop(key, None)
        self.procs.pop(key, None)
        self._maybe_crash("kill")

    def forget(self, key):
        self.machine.records.pop(key, None)
        self.machine.went.discard(key)

    def reap(self, keep):
        for key in [k for k in self.machine.records if k not in keep]:
            if self.machine.alive.pop(key, None) is not None:
                self.machine.killed.append(key)
            self.forget(key)

    def shutdown(self, kill=False):
        pass


@pytest.mark.parametrize("dies", ["launch", "exits", "kill", "exits, two at once"])
def test_a_local_reservations_job_caught_by_a_restart_runs_once_and_keeps_its_verdict(tmp_path, monkeypatch, dies):
    """On the local executor, the service is killed right after an outside action and before the
    record of what it decided: after it launched a winner's command (``launch``: the restarted
    service re-attaches that process, never runs the command twice), after it found the job
    ended (``exits``: completed with the exit status its wrapper wrote, also for a second job
    found ended in the same scan, which was "failed: process lost" before), after it killed the
    job at its slot's end (``kill``: killed, "reservation ended", as the uninterrupted service)."""
    import marketsched.platform.executor as executor

    machine = LocalMachine()
    monkeypatch.setattr(executor, "LocalExecutor", lambda root, limits=None: FakeLocal(root, machine))
    clock = FakeClock(0.0)
    config = DayAheadConfig(clear_at=10.0, period_start=100.0, horizon=600.0, granularity=60.0, repeat=0,
                            mechanism="relaxed", capacity=2)

    def service():
        b = Broker(tmp_path / "m", MarketConfig(single_user=True), clock=clock,
                   executor=ScriptedExecutor(tmp_path / "m" / "jobs", os=FakeOS()))
        return b, DayAhead(b, config)

    b, da = service()
    b.add_user(True, "u", deposit=50.0)
    xs = [da.place_bid("u", length=60, deadline=60, value=20.0, nodes=1, command="echo reserved")
          for _ in range(2 if dies == "exits, two at once" else 1)]
    clock.set(config.clear_at)
    da.tick()
    xs = [da.bid(x["id"]) for x in xs]
    assert all(x["state"] == "won" for x in xs) and len({x["start_t"] for x in xs}) == 1
    ids = [x["id"] for x in xs]
    clock.set(xs[0]["start_t"])
    if dies == "launch":
        FakeLocal.crash = "launch"
    else:
        da.tick()
        assert [da.bid(i)["job_state"] for i in ids] == ["running"] * len(ids)
        if dies == "kill":
            clock.set(xs[0]["end_t"])
            FakeLocal.crash = "kill"
        else:
            for i in ids:
                del machine.alive[i]
                machine.codes[i] = 0
            FakeLocal.crash = "exits"
    with pytest.raises(Crash):
        da.tick()
    b.store.close()
    b, da = service()  # started again on the same data
    da.tick()
    da.tick()
    got = [da.bid(i) for i in ids]
    assert machine.launches == ids  # each command launched once
    if dies == "launch":
        assert got[0]["job_state"] == "running" and ids[0] in machine.alive
    elif dies == "kill":
        assert (got[0]["job_state"], got[0]["note"]) == ("killed", "reservation ended")
    else:
        assert [(x["job_state"], x["exit_code"]) for x in got] == [("completed", 0)] * len(ids)
    FakeLocal.crash = None
    b.store.close()
