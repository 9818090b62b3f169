"""The Slurm executor's rules without a cluster: a fake Slurm records the commands, so the
eligibility gate (a prefix of the mechanism's queue on which Slurm's order agrees), the safe
order of operations (gates, suspends, resumes, ungates), the 2 s resume rule and the capacity
check on resume are checked exactly."""

import time

import pytest

import marketsched.live.slurm as slurm


class FakeSlurm:
    def __init__(self, cpus=4, running=0):
        self.cmds = []
        self.next_id = 100
        self.cpus = cpus
        self.running = running
        self.refuse: dict[int, str] = {}  # slurm id -> the error an update of it gets

    def __call__(self, args, timeout=30.0, input=None):
        self.cmds.append(args)
        if args[:2] == ["scontrol", "update"] and int(args[2].split("=")[1]) in self.refuse:
            jid = int(args[2].split("=")[1])
            raise slurm.SlurmError(f"`{' '.join(args)}` failed (exit 1): {self.refuse[jid]} for job {jid}")
        if args[0] == "sbatch":
            assert input is not None and input.startswith("#!/bin/sh"), "sbatch gets its script on stdin"
        if args[0] == "sinfo":
            return f"0/{self.cpus}/0/{self.cpus}\n"
        if args[0] == "sbatch":
            self.next_id += 1
            return f"{self.next_id}\n"
        if args[:4] == ["squeue", "-h", "-t", "R"]:
            return "1\n" * self.running
        return ""

    def ops(self):
        """The control operations issued, as (verb, slurm id, value)."""
        out = []
        for a in self.cmds:
            if a[0] == "scontrol" and a[1] == "update":
                jid = int(a[2].split("=")[1])
                for kv in a[3:]:
                    k, v = kv.split("=", 1)
                    out.append(({"StartTime": "gate" if v != "now" else "ungate"}.get(k, k), jid, v))
            elif a[0] == "scontrol" and a[1] in ("suspend", "resume"):
                out.append((a[1], int(a[2]), None))
            elif a[0] == "sbatch":
                gated = any(x.startswith("--begin=") for x in a)
                prio = next(x for x in a if x.startswith("--priority=")).split("=")[1]
                out.append(("sbatch-gated" if gated else "sbatch", None, prio))
        return out


@pytest.fixture
def fake(monkeypatch):
    f = FakeSlurm()
    monkeypatch.setattr(slurm, "run", f)
    return f


def q(i, key, preempted=False):
    return {"id": i, "key": key, "command": "true", "env": {}, "preempted": preempted}


def test_eligible_prefix_stops_at_a_preempted_job_and_at_a_priority_disagreement(fake, tmp_path):
    ex = slurm.SlurmExecutor(tmp_path, slots=4)
    fake.cmds.clear()
    # keys 5 and 4 eligible; 3.0002 and 3.0001 round to one priority (3000): Slurm orders them by
    # job id (submission), the mechanism by key
    ex.arrange([q(1, 5.0), q(2, 4.0), q(3, 3.0001)])
    ex.arrange([q(1, 5.0), q(2, 4.0), q(4, 3.0002), q(3, 3.0001)])
    assert not ex.queued[1].gated and not ex.queued[2].gated
    assert ex.queued[4].priority == ex.queued[3].priority == 3000
    # job 4 (submitted later, larger id) comes first for the mechanism: it stays eligible; job 3,
    # which Slurm would put before 4 (same priority, older id), is gated
    assert ex.queued[4].pid > ex.queued[3].pid
    assert not ex.queued[4].gated and ex.queued[3].gated
    # a preempted job closes the prefix: nothing ranked below it may take its CPU
    fake.cmds.clear()
    ex.arrange([q(1, 5.0), q(9, 4.5, preempted=True), q(2, 4.0)])
    assert not ex.queued[1].gated and ex.queued[2].gated
    assert ("gate", ex.queued[2].pid, slurm.GATE) in fake.ops()


def test_safe_order_two_second_rule_and_capacity_on_resume(fake, tmp_path):
    ex = slurm.SlurmExecutor(tmp_path, slots=4)
    a = ex.launch(1, "true", priority_key=2.0)
    b = ex.launch(2, "true", priority_key=2.0)
    assert [o[0] for o in fake.ops()] == ["sbatch", "sbatch"] and fake.ops()[0][2] == "2000"
    ex.arrange([q(3, 1.5)])  # a lower bid queues, eligible
    fake.cmds.clear()
    # a decision: preempt job 2, and job 3 must not take its CPU: gate before the suspend
    ex.stop(2)
    ex.arrange([q(2, 2.0, preempted=True), q(3, 1.5)])
    assert [o[0] for o in fake.ops()] == ["gate", "suspend"]
    assert fake.ops()[1][1] == b.pid
    # the market resumes it at once: deferred by the 2 s rule
    fake.cmds.clear()
    ex.cont(2)
    ex.flush()
    assert fake.ops() == [] and 2 in ex._resume
    ex.procs[2].suspended_at = time.monotonic() - 3  # 3 s later ...
    fake.running = 4  # ... but Slurm runs 4 jobs on 4 CPUs: resuming would oversubscribe
    ex.flush()
    assert [o[0] for o in fake.ops()] == [] and 2 in ex._resume
    fake.running = 3
    ex.flush()
    assert [o[0] for o in fake.ops()] == ["resume"] and 2 not in ex._resume
    # a stop followed by a cont within one decision does nothing at all
    fake.cmds.clear()
    ex.stop(1)
    ex.cont(1)
    ex.flush()
    assert fake.ops() == [] and a.suspended_at is None


def test_more_slots_than_cpus_is_refused_and_fewer_gates_everything(fake, tmp_path):
    with pytest.raises(ValueError, match="only 4 CPUs"):
        slurm.SlurmExecutor(tmp_path, slots=5)
    ex = slurm.SlurmExecutor(tmp_path, slots=2)
    ex.arrange([q(1, 5.0), q(2, 4.0)])
    assert ex.queued[1].gated and ex.queued[2].gated  # the spare CPUs must stay unused


def test_a_gate_that_comes_after_slurm_started_the_job_is_left_to_the_poll(fake, tmp_path):
    # Slurm gives a free CPU to an eligible job at once; the market's next decision may want it
    # gated a moment later: the update then fails ("no longer pending"), which is not an error
    # (the poll finds the job running unstarted and suspends it after UNSTARTED_GRACE)
    ex = slurm.SlurmExecutor(tmp_path, slots=4)
    ex.arrange([q(1, 4.0)])
    sid = ex.queued[1].pid
    assert not ex.queued[1].gated
    fake.refuse[sid] = "Job is no longer pending execution"
    ex.arrange([q(9, 4.5, preempted=True), q(1, 4.0)])  # 1 falls out of the eligible prefix
    assert ("gate", sid, slurm.GATE) in fake.ops() and ex.queued[1].gated
    fake.refuse[sid] = "Access/permission denied"  # any other refusal is still an error
    with pytest.raises(slurm.SlurmError, match="permission denied"):
        ex.arrange([q(1, 4.0)])
