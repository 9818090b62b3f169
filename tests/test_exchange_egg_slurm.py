"""Egg mode (Kang & Parkes 2007) on a Slurm provider's backend (:class:`SlurmBackend`) with a
fake Slurm: the four ends of a contract's Slurm job (exited by itself, cancelled by the
provider's side, running at ``tau*``, still waiting in Slurm at ``tau*``) give the verdicts and
escrow moves of the fault table, and the jobs are submitted with the contract's CPUs and
memory. The same on the real one-host cluster: tests/test_exchange_live_egg_slurm.py."""

from __future__ import annotations

import pytest

import marketsched.platform.slurm as slurm
from exchange_helpers import egg_slurm_exchange
from marketsched.exchange import egg
from marketsched.exchange.store import MICRO
from marketsched.platform.clock import FakeClock
from test_slurm_gate import FakeSlurm

HOUR = 3600.0


class Accounted(FakeSlurm):
    """A fake Slurm whose accounting (``sacct``) answers from ``acct`` (slurm id -> state), with
    the CPUs and memory the job asked for; ``scontrol show job`` from ``states``."""

    def __init__(self):
        super().__init__(cpus=8)
        self.acct: dict[int, str] = {}
        self.asked: dict[int, tuple[str, str]] = {}  # slurm id -> (-c, --mem) of its sbatch
        self.frees: dict[int, int] = {}  # slurm id -> the waiting job Slurm starts when it is cancelled

    def __call__(self, args, timeout=30.0, input=None, env=None):
        if args[0] == "scancel" and args[1].isdigit() and int(args[1]) in self.frees:
            self.states[self.frees.pop(int(args[1]))] = "RUNNING"  # on the CPUs the cancel freed
        if args[0] == "sacct":
            jid = int(args[args.index("-j") + 1])
            if jid not in self.acct:
                return ""
            cpus, mem = self.asked[jid]
            return f"{jid}|{self.acct[jid]}|{cpus}|{mem}|00:00.000|\n"
        out = super().__call__(args, timeout, input, env)
        if args[0] == "sbatch":
            mem = next(a for a in args if a.startswith("--mem=")).split("=")[1]
            self.asked[self.next_id] = (args[args.index("-c") + 1], mem)
        return out

    def cancel_unaccounted(self, ex, job: int) -> None:
        """Job ``job`` runs (a tick sees it), then ends with ``sacct`` still showing it running
        (accounting lags the end; a tick sees the end)."""
        self.states[job] = "RUNNING"
        ex.tick()
        del self.states[job]
        self.acct[job] = "RUNNING"
        ex.tick()

    def cancelled(self):
        return [int(a[1]) for a in self.cmds if a[0] == "scancel" and a[1].isdigit()]


@pytest.fixture
def egg_slurm(monkeypatch, tmp_path):
    fake = Accounted()
    monkeypatch.setattr(slurm, "run", fake)
    clock = FakeClock()
    ex = egg_slurm_exchange(tmp_path / "ex", clock, single_user=True)  # any cancel is the provider's
    ex.backend("cluster").executor.poll = 0.0  # every tick reads the fake's queue
    yield ex, clock, fake
    ex.close()
    ex.store.close()


def _bid(ex, **body):
    with ex.store.transaction():
        return egg.submit_bid(ex.egg, "u1", {"description": [2.5], "value": 19, "deadline": 3 * HOUR,
                                             "command": "true", **body}, ex.clock())


def _contract(ex, cid):
    return {c["id"]: c for c in egg.contracts(ex.store)}[cid]


def test_each_end_of_a_slurm_job_gives_the_fault_tables_verdict_and_escrow(egg_slurm):
    ex, clock, fake = egg_slurm
    cids = [_bid(ex, cpu=cpu, mem=mem)["contract"] for cpu, mem in ((1, 0), (2, 100), (1, 0), (1, 0))]
    exits, cancelled, at_tau, waiting = cids
    ex.tick()
    jobs = dict(zip(cids, range(fake.next_id - 3, fake.next_id + 1)))
    assert [fake.asked[jobs[c]] for c in cids] == [("1", "32M"), ("2", "100M"), ("1", "32M"), ("1", "32M")]
    for c in cids:
        fake.states[jobs[c]] = "PENDING" if c == waiting else "RUNNING"
    ex.tick()
    assert {c["state"] for c in egg.contracts(ex.store)} == {"running"}
    # the first exits by itself; root cancels the second (Slurm's accounting says so)
    del fake.states[jobs[exits]], fake.states[jobs[cancelled]]
    fake.acct[jobs[exits]] = "COMPLETED"
    fake.acct[jobs[cancelled]] = "CANCELLED by 0"
    ex.tick()
    got = {c: _contract(ex, c) for c in cids}
    assert (got[exits]["state"], got[exits]["escrow"], got[exits]["note"]) == \
        ("delivered", "held", "the job exited by itself")
    assert (got[cancelled]["state"], got[cancelled]["escrow"]) == ("failed", "held")
    assert got[cancelled]["note"] == "the provider ended the job: slurm: CANCELLED by 0 (not by the job's account)"
    assert got[at_tau]["state"] == got[waiting]["state"] == "running"
    assert fake.cancelled() == []
    tau = got[exits]["tau"]
    assert {c["tau"] for c in got.values()} == {tau}
    fake.acct.update({jobs[at_tau]: "RUNNING", jobs[waiting]: "PENDING"})
    clock.set(tau)
    ex.tick()
    got = {c: _contract(ex, c) for c in cids}
    assert [(got[c]["state"], got[c]["escrow"], got[c]["settled_t"]) for c in cids] == [
        ("delivered", "paid", tau), ("failed", "refunded", tau), ("delivered", "paid", tau),
        ("failed", "refunded", tau)]
    assert got[at_tau]["note"] == "ran until tau*"
    assert got[waiting]["note"] == "the provider had not started the job by tau*"
    assert sorted(fake.cancelled()) == sorted([jobs[at_tau], jobs[waiting]])  # the exchange's stops
    bal = ex.store.balances()
    assert (bal["provider:cluster"], bal["user:u1"], bal[egg.ESCROW]) == (2 * MICRO, 98 * MICRO, 0)
    (p,) = egg.reliability(ex.egg, clock())
    assert (p["reliability"], p["completed"], p["settled"]) == (3 / 6, 2, 4)  # (1 + 2) / (2 + 4)
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def test_a_job_cancelled_just_before_tau_is_judged_by_its_accounting_not_as_run_until_tau(egg_slurm):
    """Root cancels a running job just before tau*; Slurm's accounting still shows it running
    when tau* comes (sacct lags the end): the verdict waits for the final accounting (failed,
    refunded), never "ran until tau*" with the provider paid (as it was before)."""
    ex, clock, fake = egg_slurm
    cid = _bid(ex)["contract"]
    ex.tick()
    job = fake.next_id
    fake.cancel_unaccounted(ex, job)  # by root
    tau = _contract(ex, cid)["tau"]
    clock.set(tau)
    ex.tick()
    c = _contract(ex, cid)
    assert (c["state"], c["escrow"]) == ("running", "held"), c["note"]
    fake.acct[job] = "CANCELLED by 0"
    ex.tick()
    c = _contract(ex, cid)
    assert (c["state"], c["escrow"], c["settled_t"]) == ("failed", "refunded", tau)
    assert "CANCELLED by 0" in c["note"] and fake.cancelled() == []
    assert ex.store.balances()["user:u1"] == 100 * MICRO
    ex.store.check_books()


def test_a_job_slurm_starts_on_the_cpus_another_contracts_stop_at_tau_frees_had_not_started_by_tau(egg_slurm):
    """Two contracts due at the same tau*: one's job runs on all the partition's CPUs, the
    other's waits in Slurm. The exchange's stop of the first at tau* frees the CPUs and Slurm
    starts the second at once: it had still not started by tau* (failed, refunded), whatever
    the order of the stops (before: judged "ran until tau*" and paid)."""
    ex, clock, fake = egg_slurm
    hog, waiting = _bid(ex, cpu=8)["contract"], _bid(ex, cpu=8)["contract"]
    ex.add_node("cluster", "spare", 8, 1000)
    ex.tick()
    assert _contract(ex, waiting)["state"] == "failed"  # no room on `main` when it was awarded
    jobs = {hog: fake.next_id}
    fake.states[jobs[hog]] = "RUNNING"
    waiting = _bid(ex, cpu=8)["contract"]  # on `spare` now
    ex.tick()
    jobs[waiting] = fake.next_id
    fake.states[jobs[waiting]] = "PENDING"
    fake.frees[jobs[hog]] = jobs[waiting]
    ex.tick()
    clock.set(_contract(ex, hog)["tau"])
    ex.tick()
    h, w = _contract(ex, hog), _contract(ex, waiting)
    assert (h["state"], h["escrow"], h["note"]) == ("delivered", "paid", "ran until tau*")
    assert (w["state"], w["escrow"], w["note"]) == ("failed", "refunded", "the provider had not started the job by tau*")
    assert sorted(fake.cancelled()) == sorted(jobs.values())
    ex.store.check_books()
