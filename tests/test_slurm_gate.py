"""The Slurm executor's rules without a cluster: a fake Slurm records the commands, so the
eligibility gate (a prefix of the mechanism's queue on which Slurm's order agrees), the safe
order of operations (gates, suspends, resumes, ungates), the 2 s resume rule and the capacity
check on resume are checked exactly."""

import time

import pytest

import marketsched.platform.slurm as slurm


class FakeSlurm:
    def __init__(self, cpus=4, running=0):
        self.cmds = []
        self.next_id = 100
        self.cpus = cpus
        self.running = running
        self.other = 0  # CPUs of nodes that are down (sinfo's "other")
        self.refuse: dict[int, str] = {}  # slurm id -> the error an update of it gets
        self.states: dict[int, str] = {}  # slurm id -> its state in squeue (default RUNNING)
        self.unlaunched: set[int] = set()  # RUNNING in Slurm, tasks not started on the node yet
        self.launch_after: dict[int, int] = {}  # slurm id -> sstat calls that find it unlaunched
        self.idle: dict[str, int] | None = None  # node -> idle CPUs (None: one node, all CPUs idle)
        self.node_of: dict[int, str] = {}  # slurm id -> its node (scontrol show job NodeList)
        self.envs: list[dict | None] = []  # the environment each command ran in (None: the caller's)
        self.node_state = "idle"  # sinfo %t of the (one) node; "idle*": the controller cannot reach it

    def __call__(self, args, timeout=30.0, input=None, env=None):
        self.cmds.append(args)
        self.envs.append(env)
        if args[:2] == ["scontrol", "update"] and int(args[2].split("=")[1]) in self.refuse:
            jid = int(args[2].split("=")[1])
            raise slurm.SlurmError(f"`{' '.join(args)}` failed (exit 1): {self.refuse[jid]} for job {jid}")
        if args[0] == "sbatch":
            assert input is not None and input.startswith("#!/bin/sh"), "sbatch gets its script on stdin"
        if args[0] == "sinfo" and "%P" in args:
            return "main*\npa\n"
        if args[0] == "sinfo" and "%N %C %t" in args:
            return f"localhost 0/{self.cpus - self.other}/{self.other}/{self.cpus} {self.node_state}\n"
        if args[0] == "sinfo" and "-N" in args:
            idle = self.idle if self.idle is not None else {"localhost": self.cpus}
            return "".join(f"{n} {self.cpus - i}/{i}/0/{self.cpus}\n" for n, i in idle.items())
        if args[0] == "sinfo":
            return f"0/{self.cpus - self.other}/{self.other}/{self.cpus}\n"
        if args[:4] == ["scontrol", "-o", "show", "job"]:
            jid = int(args[4])
            return f"JobId={jid} JobState={self.states.get(jid, 'SUSPENDED')} NodeList={self.node_of.get(jid, '')}\n"
        if args[0] == "sbatch":
            self.next_id += 1
            return f"{self.next_id}\n"
        if args[:4] == ["squeue", "-h", "-t", "R"]:
            return "1\n" * self.running
        if args[:3] == ["squeue", "-h", "-j"]:
            return self.states.get(int(args[3]), "RUNNING") + "\n"
        if args[:3] == ["squeue", "-h", "-a"]:
            return "".join(f"{j}|{st}|None\n" for j, st in self.states.items())
        if args[0] == "sstat":
            jid = int(args[args.index("-j") + 1])
            if self.states.get(jid, "RUNNING") == "PENDING":
                raise slurm.SlurmError(f"`sstat` failed (exit 1): sstat: error: No steps running for job {jid}")
            if self.launch_after.get(jid, 0) > 0:
                self.launch_after[jid] -= 1
                return f"{jid}.batch|\n"
            return f"{jid}.batch|\n" if jid in self.unlaunched else f"{jid}.batch|{jid + 5000}\n"
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


def test_a_suspend_waits_until_the_jobs_tasks_run_on_its_node(fake, tmp_path):
    # Slurm says RUNNING from the allocation; a suspend that reaches slurmd before the batch
    # step runs its tasks is lost (Slurm 22.05 under load). The executor suspends once sstat lists
    # the step's PIDs, retrying at every poll; a pending job is gated; a cont cancels the wait
    ex = slurm.SlurmExecutor(tmp_path, slots=4)
    ex.launch(1, "true", priority_key=2.0)
    b = ex.launch(2, "true", priority_key=2.0)
    fake.states = {ex.procs[1].pid: "RUNNING", b.pid: "RUNNING"}
    fake.unlaunched = {b.pid}
    fake.cmds.clear()
    ex.stop(2)
    ex.arrange([q(2, 2.0, preempted=True)])
    assert "suspend" not in [o[0] for o in fake.ops()] and 2 in ex._suspend and b.suspended_at is None
    assert any(a[0] == "sstat" for a in fake.cmds)
    ex._last_poll = 0.0
    ex.exits()  # a poll: still not launched, still waiting
    assert "suspend" not in [o[0] for o in fake.ops()] and 2 in ex._suspend
    fake.unlaunched.clear()  # slurmd has started the script
    ex._last_poll = 0.0
    assert ex.exits() == []
    assert [o for o in fake.ops() if o[0] == "suspend"] == [("suspend", b.pid, None)]
    assert 2 not in ex._suspend and b.suspended_at is not None
    # once seen running, it is not asked again
    fake.cmds.clear()
    b.suspended_at = None
    ex.stop(2)
    ex.flush()
    assert [a[0] for a in fake.cmds] == ["scontrol"] and fake.ops() == [("suspend", b.pid, None)]

    # a job whose tasks never started because Slurm still has it pending is gated instead
    c = ex.launch(3, "true", priority_key=1.0)
    fake.states[c.pid] = "PENDING"
    fake.cmds.clear()
    ex.stop(3)
    ex.flush()
    assert fake.ops() == [("gate", c.pid, slurm.GATE)] and 3 not in ex._suspend and c.gated

    # the market resumes a job whose suspend is still waiting: nothing is sent at all
    d = ex.launch(4, "true", priority_key=1.0)
    fake.states[d.pid] = "RUNNING"
    fake.unlaunched = {d.pid}
    ex.stop(4)
    ex.flush()
    fake.cmds.clear()
    ex.cont(4)
    fake.unlaunched.clear()
    ex.flush()
    assert fake.ops() == [] and 4 not in ex._suspend and 4 not in ex._resume and d.suspended_at is None


class FakeClock:
    """``time.monotonic`` and ``time.sleep`` for the executor: sleeping advances the clock, so
    a wait bounded in seconds is checked without the wall clock."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_shutdown_suspends_a_job_whose_tasks_start_late(fake, tmp_path, monkeypatch):
    # the broker suspends every job it runs at a shutdown; a job Slurm calls RUNNING whose batch
    # script has not started yet is suspended once it has (here: the third sstat sees it)
    clock = FakeClock()
    monkeypatch.setattr(slurm, "time", clock)
    ex = slurm.SlurmExecutor(tmp_path, slots=4, poll=0.2)
    a = ex.launch(1, "true", priority_key=1.0)
    fake.launch_after[a.pid] = 2
    ex.stop(1)
    t0 = clock.now
    ex.shutdown()
    assert fake.ops()[-1] == ("suspend", a.pid, None) and a.suspended_at is not None
    assert sum(c[0] == "sstat" for c in fake.cmds) == 3 and clock.now - t0 == pytest.approx(0.4)
    # one that never starts is retried at every poll for SHUTDOWN_WAIT s, then left running
    # (the next broker re-attaches it)
    ex = slurm.SlurmExecutor(tmp_path, slots=4, poll=0.2)
    b = ex.launch(2, "true", priority_key=1.0)
    fake.unlaunched = {b.pid}
    ex.stop(2)
    fake.cmds.clear()
    t0 = clock.now
    ex.shutdown()
    assert ("suspend", b.pid, None) not in fake.ops() and b.suspended_at is None
    waited = clock.now - t0
    assert slurm.SHUTDOWN_WAIT <= waited < slurm.SHUTDOWN_WAIT + 0.2 + 1e-9
    assert sum(c[0] == "sstat" for c in fake.cmds) == 1 + round(waited / 0.2)  # flush's, then one per poll


@pytest.mark.parametrize("states, up", [("idle\n", True), ("comp\n", True), ("alloc\n", True), ("plnd\n", True),
                                        ("down\ndrain\n", False), ("", False), ("drng\ncomp\n", True),
                                        ("idle*\n", False), ("idle*\nmix\n", True), ("idle~\n", True)])
def test_slurm_is_up_while_its_node_finishes_a_cancelled_job(monkeypatch, states, up):
    # right after a cancel, sinfo shows the node "comp" for up to KillWait (5 s); it is usable
    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(slurm, "run", lambda args, timeout=30.0, input=None: states)
    assert slurm.slurm_up() is up


def test_on_several_nodes_a_job_resumes_only_when_its_own_node_has_an_idle_cpu(fake, tmp_path):
    """Slurm resumes a suspended job on its own node, with no capacity check: on a partition of
    several nodes the executor resumes it only when that node has an idle CPU (sinfo -N); a
    free CPU on another node does not count."""
    fake.idle = {"node1": 0, "node2": 0}
    ex = slurm.SlurmExecutor(tmp_path, slots=4)
    job = ex.launch(1, "true", priority_key=2.0)
    fake.node_of[job.pid] = "node1"
    ex.stop(1)
    ex.flush()
    ex.cont(1)
    ex.procs[1].suspended_at = time.monotonic() - 3  # past the 2 s rule
    fake.running = 3  # a CPU free in the partition ...
    fake.idle = {"node1": 0, "node2": 1}  # ... but on node2
    fake.cmds.clear()
    ex.flush()
    assert "resume" not in [o[0] for o in fake.ops()] and 1 in ex._resume
    fake.idle = {"node1": 1, "node2": 1}  # its node frees a CPU
    ex.flush()
    assert [o[0] for o in fake.ops()] == ["resume"] and 1 not in ex._resume
    # one idle CPU on the node serves one resume only
    fake.idle = {"node1": 1, "node2": 0}
    fake.running = 0
    two = [ex.launch(k, "true", priority_key=2.0) for k in (2, 3)]
    for k, j in zip((2, 3), two):
        fake.node_of[j.pid] = "node1"
        ex.stop(k)
    ex.flush()
    for k in (2, 3):
        ex.cont(k)
        ex.procs[k].suspended_at = time.monotonic() - 3
    fake.cmds.clear()
    ex.flush()
    assert [o[0] for o in fake.ops()] == ["resume"] and len(ex._resume) == 1
