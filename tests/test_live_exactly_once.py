"""Exactly once, checked deterministically with an injected clock and a scripted executor (no
processes): a preempted job whose process had already ended is never launched again when
another job ends in the same batch; a job's process starts only after its row is committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.clock import FakeClock


@dataclass
class FakeProc:
    key: int
    pid: int
    start_ticks: int = 1
    workdir: Path | None = None
    popen: None = None


@dataclass
class ScriptedExecutor:
    """The executor interface with no processes: launches, stops, continues and kills are
    recorded; ``ended`` lists the exits the next :meth:`exits` call reports (all in one batch,
    as a real executor reports the exits it found in one scan)."""

    root: Path
    procs: dict = field(default_factory=dict)
    launches: list = field(default_factory=list)
    log: list = field(default_factory=list)
    ended: list = field(default_factory=list)
    on_launch: object = None

    def workdir(self, key):
        return self.root / f"job-{key}"

    def launch(self, key, command, env=None, **kw):
        if self.on_launch is not None:
            self.on_launch(key)
        self.launches.append(key)
        self.log.append(("launch", key))
        proc = FakeProc(key, 1000 + len(self.launches), workdir=self.workdir(key))
        self.procs[key] = proc
        return proc

    def stop(self, key):
        self.log.append(("stop", key))
        return key in self.procs

    def cont(self, key):
        self.log.append(("cont", key))
        return key in self.procs

    def kill(self, key):
        self.log.append(("kill", key))
        self.procs.pop(key, None)

    def adopt(self, key, *a, **kw):
        return None

    def recorded(self, key):
        return None

    def reap(self, keep):
        return 0

    def forget(self, key):
        pass

    def exits(self):
        out = []
        for key, code in self.ended:  # the executor forgets a process once it reports its exit
            self.procs.pop(key, None)
            out.append((key, code))
        self.ended = []
        return out

    def wait(self, timeout):
        pass

    def wake(self):
        pass

    def shutdown(self, kill=False):
        pass


def market(tmp_path, slots=1, **cfg):
    clock = FakeClock(0.0)
    ex = ScriptedExecutor(tmp_path / "jobs")
    b = Broker(tmp_path / "market", MarketConfig(slots=slots, single_user=True, **cfg), clock=clock, executor=ex)
    b.ensure_admin()
    return b, clock, ex


def test_preempted_job_whose_process_ended_is_not_launched_again_when_another_ends_in_the_same_batch(tmp_path):
    b, clock, ex = market(tmp_path, slots=1)
    b.add_user(True, "alice", 100)
    b.add_user(True, "bob", 100)
    low = b.submit("alice", False, 2.0, "low")["id"]
    clock.set(1.0)
    high = b.submit("bob", False, 5.0, "high")["id"]  # HB: low is preempted, high launched
    assert ex.launches == [low, high] and ("stop", low) in ex.log
    assert b.job("admin", True, low)["state"] == "preempted"
    # both processes are found ended in one scan: high (running) ended, and low, whose process
    # had already ended just as it was stopped; high's end alone would resume low
    clock.set(2.0)
    ex.ended = [(high, 0), (low, 0)]
    b.step()
    assert ex.launches == [low, high], "a job whose process had ended was launched again"
    assert b.job("admin", True, low)["state"] == "completed"
    assert b.job("admin", True, high)["state"] == "completed"
    assert b.running_jobs == set() and b.price()["running"] == 0
    assert [j["attempts"] for j in b.jobs("admin", True)] == [1, 1]
    b.stop()


def test_the_same_race_in_the_other_order_of_the_scan(tmp_path):
    b, clock, ex = market(tmp_path, slots=1)
    b.add_user(True, "alice", 100)
    low = b.submit("alice", False, 2.0, "low")["id"]
    clock.set(1.0)
    high = b.submit("alice", False, 5.0, "high")["id"]
    clock.set(2.0)
    ex.ended = [(low, 0), (high, 0)]
    b.step()
    assert ex.launches == [low, high]
    assert {j["id"]: j["state"] for j in b.jobs("admin", True)} == {low: "completed", high: "completed"}
    b.stop()
