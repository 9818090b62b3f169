"""Parallel jobs in the live market (``market submit --cpus K``) without a cluster: the broker on
the Slurm executor with a fake Slurm and an injected clock (the pattern of
tests/test_capacity_follows_nodes.py). The mechanism decides on whole jobs, a job pays per CPU,
the recorded run (each job's K) replays to the ledger exactly, and Slurm is asked for K tasks
(``-n K``) that a resume waits for on each of the job's nodes."""

import numpy as np
import pytest

import marketsched.platform.slurm as slurm
from marketsched.live.broker import MarketError
from marketsched.live.replay import simulate_recorded
from test_capacity_follows_nodes import market, states  # noqa: F401 (market: the fixture, 4 CPUs, HB, k-th price)
from test_slurm_gate import FakeSlurm, q


def sbatch_of(fake, slurm_id):
    """The sbatch command line that made Slurm job ``slurm_id`` (ids count from 101)."""
    return [a for a in fake.cmds if a[0] == "sbatch"][slurm_id - 101]


def tasks(args):
    """``(-n, -c)`` of an sbatch command line."""
    return args[args.index("-n") + 1], args[args.index("-c") + 1]


def test_a_wide_job_waits_whole_pays_per_cpu_and_the_ledger_is_the_replay(market):  # noqa: F811
    """4 CPUs, HB, k-th price. t=0: A (bid 5, 1 CPU) and B (bid 2, 2 CPUs) run; the queue is empty,
    so each pays the reservation price 1 per CPU. t=10: C (bid 3, 4 CPUs) preempts B but does not
    fit beside A: it waits whole, and B (after it in the order) waits too; A pays the k-th price 3.
    t=20: A ends, C runs on all 4 CPUs at the k-th price 2 (B's bid) per CPU: 8 per second.
    t=30: C ends, B resumes at 1 per CPU. t=40: B ends."""
    b, fake, clock = market
    ids = {}
    for name, bid, k in (("A", 5.0, 1), ("B", 2.0, 2)):
        ids[name] = b.submit("a", False, bid, "true", procs=k)["id"]
    assert states(b) == {ids["A"]: "running", ids["B"]: "running"}
    sid = {n: b.executor.recorded(j)[0] for n, j in ids.items()}
    assert tasks(sbatch_of(fake, sid["B"])) == ("2", "1")  # two tasks of one CPU: Slurm places them
    assert b.job("admin", True, ids["B"])["rate"] == pytest.approx(2.0)  # 2 CPUs x the price 1
    clock.set(10.0)
    b.step()
    ids["C"] = b.submit("a", False, 3.0, "true", procs=4)["id"]
    sid["C"] = b.executor.recorded(ids["C"])[0]
    st = states(b)
    assert (st[ids["A"]], st[ids["B"]], st[ids["C"]]) == ("running", "preempted", "queued")
    c_sbatch = sbatch_of(fake, sid["C"])
    assert tasks(c_sbatch) == ("4", "1") and any(x.startswith("--begin=") for x in c_sbatch)  # wide: gated
    assert ("suspend", sid["B"], None) in fake.ops()
    assert b.job("admin", True, ids["A"])["rate"] == pytest.approx(3.0)
    for t, name in ((20.0, "A"), (30.0, "C"), (40.0, "B")):
        clock.set(t)
        fake.ended.add(sid[name])
        b.step()
        if name == "A":
            assert states(b)[ids["C"]] == "running"
            assert b.job("admin", True, ids["C"])["rate"] == pytest.approx(8.0)  # 4 CPUs x B's bid 2
            clock.set(21.0)
            b.step()  # the next round carries the market's start out: C's Slurm job is ungated
            assert ("ungate", sid["C"], "now") in fake.ops()
    jobs = [b.job("admin", True, ids[n]) for n in "ABC"]
    assert [j["state"] for j in jobs] == ["completed"] * 3 and [j["procs"] for j in jobs] == [1, 2, 4]
    np.testing.assert_allclose([j["charged"] for j in jobs], [10 + 30, 20 + 20, 80], atol=2e-6)
    # the recorded run (submit times, run times, each job's CPUs) replays to the ledger exactly
    rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], [5.0, 2.0, 3.0], 4,
                            procs=[j["procs"] for j in jobs])
    np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"])


def test_cpus_out_of_range_and_admission_per_cpu(market):  # noqa: F811
    b, fake, clock = market
    for bad in (0, 5, -2, 2.5, True, "4"):
        with pytest.raises(MarketError, match="must be a whole number from 1 to 4") as e:
            b.submit("a", False, 1.0, "true", procs=bad)
        assert e.value.status == 400
    for bad in ("yes", 1, None):
        with pytest.raises(MarketError, match="restartable must be true or false") as e:
            b.submit("a", False, 1.0, "true", restartable=bad)
        assert e.value.status == 400
    b.add_user(True, "poor", 3)  # covers 1 s at the price 1 on 3 CPUs, not on 4
    with pytest.raises(MarketError, match="x 4 CPUs") as e:
        b.submit("poor", False, 1.0, "true", procs=4)
    assert e.value.status == 402
    assert b.submit("poor", False, 1.0, "true", procs=3)["state"] == "running"


class WideSlurm(FakeSlurm):
    """A fake Slurm whose job 101 holds 2 CPUs on node1 and 2 on node2 (``scontrol -d``)."""

    def __call__(self, args, timeout=30.0, input=None, env=None):
        if args[:3] == ["scontrol", "-d", "-o"]:
            self.cmds.append(args)
            return (f"JobId={args[5]} JobState=SUSPENDED NodeList=node[1-2] NumTasks=4   Nodes=node[1-2] "
                    "CPU_IDs=0-1 Mem=0 GRES= MinCPUsNode=1\n")
        if args[:3] == ["scontrol", "show", "hostnames"]:
            return "node1\nnode2\n"
        return super().__call__(args, timeout, input, env)


def test_a_wide_job_resumes_only_when_each_of_its_nodes_has_its_cpus(monkeypatch, tmp_path):
    fake = WideSlurm(cpus=8)
    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path, slots=8)
    ex.arrange([{**q(1, 3.0), "tasks": 4}])
    assert fake.ops() == [("sbatch-gated", None, "3000")]  # a wide job is never eligible by itself
    ex.launch(1, "true")
    ex.flush()
    assert ("ungate", 101, "now") in fake.ops()
    job = ex.procs[1]
    assert job.tasks == 4 and ex.cpus_per_node(job) == {"node1": 2, "node2": 2}
    job.suspended_at = 0.0  # suspended long ago (the 2 s rule does not hold it)
    fake.idle = {"node1": 2, "node2": 1, "node3": 2, "node4": 2}  # 5 CPUs idle, one short on node2
    ex.cont(1)
    ex.flush()
    assert ("resume", 101, None) not in fake.ops() and 1 in ex._resume
    fake.idle = {"node1": 2, "node2": 2, "node3": 0, "node4": 0}
    ex.flush()
    assert ("resume", 101, None) in fake.ops() and not ex._resume


def test_count_ids():
    assert [slurm.count_ids(x) for x in ("0", "0-1", "0-1,3", "2,4-7")] == [1, 2, 3, 5]


@pytest.mark.parametrize("restartable", [True, False])
def test_a_restartable_job_whose_node_is_full_is_requeued_the_others_wait(monkeypatch, tmp_path, restartable):
    """Job 101 (serial) was suspended on node1; the mechanism resumes it while node1 is full and
    node2 has an idle CPU. Restartable: requeued (Requeue=1, requeue, release), and once Slurm
    lists it pending again its priority is restored and it is eligible now, with Slurm's own
    requeue off again; the broker is told (``restarted``). Not restartable: it waits for node1."""
    fake = FakeSlurm(cpus=4)
    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path, slots=4, poll=0.0)
    ex.launch(1, "true", priority_key=2.0)
    fake.node_of[101] = "node1"
    job = ex.procs[1]
    job.suspended_at = 0.0  # suspended long ago
    ex.arrange([{**q(1, 2.0, preempted=True), "restartable": restartable}])
    assert job.restartable is restartable
    fake.idle = {"node1": 0, "node2": 1}
    fake.cmds.clear()
    ex.cont(1)
    ex.flush()
    verbs = [a[1] if a[0] == "scontrol" else a[0] for a in fake.cmds if a[0] in ("scontrol", "sinfo", "squeue")]
    assert "resume" not in verbs
    if not restartable:
        assert "requeue" not in verbs and 1 in ex._resume and ex.restarted == []
        return
    assert ["scontrol", "update", "jobid=101", "Requeue=1"] in fake.cmds
    assert verbs.index("requeue") < verbs.index("release") and not ex._resume
    assert ex.restarted and ex.restarted[0][0] == 1 and "node1" in ex.restarted[0][1]
    assert job.suspended_at is None and job.extra["restarts"] == 1
    fake.states[101] = "PENDING"  # back in Slurm's queue
    fake.cmds.clear()
    ex.exits()
    assert ["scontrol", "update", "jobid=101", "Priority=2000", "Requeue=0", "StartTime=now"] in fake.cmds
    fake.cmds.clear()
    ex.exits()
    assert not any(a[:2] == ["scontrol", "update"] for a in fake.cmds)  # once


class HeldSlurm(FakeSlurm):
    """Job 101 is this market's job 1, requeued and still held (a broker stopped in between)."""

    def __call__(self, args, timeout=30.0, input=None):
        if args[:4] == ["scontrol", "-o", "show", "job"]:
            self.cmds.append(args)
            return (f"JobId=101 JobName={self.name} Priority=0 JobState=PENDING Reason=JobHeldAdmin Restarts=1 "
                    "NumTasks=1\n")
        return super().__call__(args, timeout, input)


def test_a_requeued_job_still_held_at_a_broker_restart_is_released_gated(monkeypatch, tmp_path):
    fake = HeldSlurm(cpus=4)
    monkeypatch.setattr(slurm, "run", fake)
    ex = slurm.SlurmExecutor(tmp_path, slots=4, poll=0.0)
    fake.name = ex.job_name(1)
    job = ex.adopt(1, pid=101)
    assert job is not None and job.gated and 1 in ex.queued
    fake.states[101] = "PENDING"
    ex.arrange([q(2, 5.0, preempted=True), q(1, 2.0)])  # queued (key 2) behind a preempted job: not eligible
    fake.cmds.clear()
    ex.exits()
    assert ["scontrol", "release", "101"] in fake.cmds
    assert ["scontrol", "update", "jobid=101", "Priority=2000", "Requeue=0", f"StartTime={slurm.GATE}"] in fake.cmds
