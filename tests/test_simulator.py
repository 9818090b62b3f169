"""The engine's policy interface: batching, timers, metered jobs, final states, misuse errors."""

import pytest

from marketsched.engine.records import FinalState
from marketsched.engine.simulator import SchedulingError, Simulator
from marketsched.workloads.workload import Workload


class Script:
    """A policy that records every batch and runs a per-time script of actions."""

    def __init__(self, script=None):
        self.script = script or {}
        self.batches = []

    def bind(self, sim):
        self.sim = sim

    def step(self, t, arrived, completed):
        self.batches.append((t, list(arrived), list(completed), self.sim.free))
        for action in self.script.get(t, []):
            action(self.sim)


def w(submit, runtime, capacity=2, procs=None):
    return Workload.from_columns(submit_time=submit, runtime=runtime, procs=procs, capacity=capacity)


def test_simultaneous_events_are_one_batch_with_completions_first():
    # job 0 runs 0..5; jobs 1 and 2 arrive at 5: one batch sees the completion and both arrivals
    # and, in it, the processor freed by job 0 is already free.
    pol = Script({0: [lambda s: s.start(0)], 5: [lambda s: s.start(1), lambda s: s.start(2)]})
    Simulator(w([0, 5, 5], [5, 1, 1]), pol).run()
    assert pol.batches[:2] == [(0, [0], [], 2), (5, [1, 2], [0], 2)]


def test_timers_wake_the_policy():
    pol = Script({0: [lambda s: s.wake_at(3.5)]})
    Simulator(w([0], [0]), pol).run()
    assert [b[0] for b in pol.batches] == [0, 3.5]


def test_metered_job_finishes_when_the_policy_says():
    # a time-sliced policy runs job 0 at half speed: 4 s of work end at t = 8
    pol = Script({0: [lambda s: s.start_metered(0), lambda s: s.wake_at(8)], 8: [lambda s: s.finish(0)]})
    r = Simulator(w([0], [4]), pol).run()
    assert r.end_time.tolist() == [8] and r.state.tolist() == [FinalState.COMPLETED]


def test_preempt_keeps_remaining_work():
    pol = Script({0: [lambda s: s.start(0)], 2: [lambda s: s.preempt(0)], 10: [lambda s: s.start(0)]})
    r = Simulator(w([0, 2, 10], [5, 0, 0]), pol).run()
    assert r.end_time[0] == 13 and r.preemptions[0] == 1


def test_final_states_and_charges_add_up():
    def act(s):
        s.discard(1)
        s.reject(2)
        s.charge(0, 2.5)
        s.charge(0, -1.0)
        s.start(0)

    r = Simulator(w([0, 0, 0, 0], [1, 1, 1, 1]), Script({0: [act]})).run()
    assert r.counts() == {"pending": 0, "completed": 1, "rejected": 1, "discarded": 1, "killed": 1}
    assert r.payment[0] == 1.5


@pytest.mark.parametrize(
    "action, message",
    [
        (lambda s: (s.start(0), s.start(0)), "cannot start"),
        (lambda s: s.preempt(0), "not running"),
        (lambda s: (s.start(0), s.start(1)), "only 0 free"),
        (lambda s: s.wake_at(-1), "in the past"),
        (lambda s: (s.discard(0), s.kill(0)), "already ended"),
    ],
)
def test_policy_misuse_raises(action, message):
    with pytest.raises(SchedulingError, match=message):
        Simulator(w([0, 0], [1, 1], capacity=1), Script({0: [action]})).run()


def test_machine_too_small_is_an_error():
    with pytest.raises(ValueError, match="needs 3 processors"):
        Simulator(w([0], [1], capacity=4, procs=[3]), Script(), capacity=2)
