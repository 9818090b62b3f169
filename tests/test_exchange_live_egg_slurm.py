"""Egg mode (Kang & Parkes 2007) on a Slurm provider, live: an in-process Egg exchange on a fake
clock whose ``slurm`` provider runs its contracts as real batch jobs of the one-host cluster, as
the bidder's own Unix account, beside a dearer local provider. ``tau*`` is reached by setting
the clock; the tests wait only for the real jobs to start and end.

Asserted from recorded facts only: each job's own record (it writes its ``SLURM_JOB_ID`` and the
time it started, once, into its folder) and Slurm's accounting of it (``sacct``: its state, its
start and end), the contracts' verdicts and notes, the escrow's moves at ``tau*``, the
reliability, the books (``check_books``) and the replay of the events through the library.
Runs when Slurm answers (MARKETSCHED_SLURM=1 makes a missing cluster a failure)."""

from __future__ import annotations

import time

import pytest

from exchange_helpers import egg_slurm_exchange
from live_helpers import wait_for
from marketsched.exchange import egg
from marketsched.exchange.store import MICRO
from marketsched.platform.clock import FakeClock
from marketsched.platform.jobfiles import read_state
from marketsched.platform.slurm import run

HANG = 300.0  # a guard against a hang, not a timing claim
HOUR = 3600.0
OPEN = ("pending", "starting", "running")
STAMP = 'echo "$SLURM_JOB_ID $(date +%s.%N)" >> started'  # the job's own record, in its folder


@pytest.fixture
def eggslurm(cluster, accounts, open_dir):
    """:func:`egg_slurm_exchange` in open_dir/ex on a fake clock: ``cluster`` (kind slurm) with
    two nodes of 8 units (one unit = one of the one-host partition's 8 CPUs) priced 1; ``box``
    (local, CPU 0) priced 2; u1 (mapped to a fresh Unix account) with 100: every job runs as
    that account."""
    data = open_dir / "ex"
    clock = FakeClock()
    ex = egg_slurm_exchange(data, clock, single_user=False)
    ex.add_node("cluster", "spare", 8, 1000)
    store = ex.store
    store.set_unix("u1", accounts[0])
    ex.join("box")
    ex.add_node("box", "n0", 1, 1000, cpus=[0])
    act(ex, egg.post_prices, "box", [[None, 2.0, 2.0, 2.0]] * 3)
    try:
        yield ex, clock, data
    finally:
        for c in egg.contracts(store, ("starting", "running")):  # a failed test leaves nothing running
            ex.backend(c["provider"]).stop(c["id"])
        ex.close()
        store.close()


def act(ex, fn, *args):
    with ex.store.transaction():
        return fn(ex.egg, *args, ex.clock())


def bid(ex, command, **body):
    return act(ex, egg.submit_bid, "u1", {"description": [2.5], "value": 19, "deadline": 3 * HOUR,
                                              "command": command, **body})


def contract(ex, cid):
    return {c["id"]: c for c in egg.contracts(ex.store)}[cid]


def tick_until(ex, pred):
    return wait_for(lambda: (ex.tick(), pred())[1], timeout=HANG, every=0.1)


def stamps(data, cid):
    """The job's own record: (its SLURM_JOB_ID, when it started), one per start."""
    path = data / "providers" / "cluster" / f"job-{cid}" / "started"
    if not path.exists():
        return []
    return [(int(a), float(b)) for a, b in (line.split() for line in path.read_text().splitlines())]


def slurm_id(data, cid):
    return read_state(data / "providers" / "cluster", cid)["pid"]


def sacct(job):
    """Slurm's accounting of job ``job`` (its allocation): its name, state, start and end (Unix
    times; None: not yet); None while Slurm has no record of it."""
    lines = run(["sacct", "-n", "-P", "-X", "-j", str(job), "-o", "JobName,State,Start,End"]).splitlines()
    if not lines:
        return None
    name, state, *times = lines[0].split("|")
    at = [time.mktime(time.strptime(x, "%Y-%m-%dT%H:%M:%S")) if x[:1].isdigit() else None for x in times]
    return name, state, at[0], at[1]


def slurm_state(job):
    got = sacct(job)
    return got[1] if got else None


def ended_in_slurm(job):
    """Wait until Slurm's accounting has job ``job``'s final record: an end state, and its own name
    (slurmdbd may hold a job's record under the placeholder name "allocation" a moment longer)."""
    def final():
        got = sacct(job)
        return got is not None and got[0] != "allocation" and \
            got[1] not in ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED")
    return wait_for(final, HANG)


def rel(ex):
    return {p["provider"]: (p["reliability"], p["completed"], p["settled"])
            for p in egg.reliability(ex.egg, ex.clock())}


def check(ex):
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def test_a_slurm_job_runs_once_in_its_window_and_is_paid_from_escrow_at_tau(eggslurm):
    ex, clock, data = eggslurm
    got = bid(ex, STAMP)
    assert got["scheduled"] and got["provider"] == "cluster" and got["price"] == 1.0  # cheaper than box
    cid, tau = got["contract"], got["tau"]
    assert tau > clock()
    before = time.time()
    assert tick_until(ex, lambda: contract(ex, cid)["state"] not in OPEN)
    after = time.time()
    c = contract(ex, cid)
    assert (c["state"], c["escrow"]) == ("delivered", "held"), c["note"]  # withheld until tau* (rule R6)
    assert c["note"].startswith("the job exited by itself")
    (job, t), = stamps(data, cid)  # it ran once, as Slurm job `job`, inside its window
    assert before <= t <= after
    assert ended_in_slurm(job)
    name, state, start, end = sacct(job)
    assert (name, state) == (ex.backend("cluster").executor.job_name(cid), "COMPLETED")
    assert int(before) <= start <= end <= after
    assert ex.store.balances()[egg.ESCROW] == MICRO
    clock.set(tau)
    ex.tick()
    c = contract(ex, cid)
    assert (c["escrow"], c["settled_t"]) == ("paid", tau)
    bal = ex.store.balances()
    assert (bal["provider:cluster"], bal["user:u1"], bal[egg.ESCROW]) == (MICRO, 99 * MICRO, 0)
    assert rel(ex)["cluster"] == (2 / 3, 1, 1)
    check(ex)


def test_a_slurm_job_cancelled_by_root_is_the_providers_fault_and_its_own_cancel_is_the_users(eggslurm):
    """Root cancels one running job (the provider's side): failed, refunded at tau*, the
    cluster's reliability falls; a job that cancels itself (its account's own scancel) ended by
    itself: delivered and paid."""
    ex, clock, data = eggslurm
    victim = bid(ex, f"{STAMP}; sleep 300")
    own = bid(ex, f"{STAMP}; scancel $SLURM_JOB_ID; sleep 300")
    assert victim["provider"] == own["provider"] == "cluster" and victim["tau"] == own["tau"]
    v, o, tau = victim["contract"], own["contract"], victim["tau"]
    assert tick_until(ex, lambda: contract(ex, v)["state"] == "running" and stamps(data, v))
    run(["scancel", str(slurm_id(data, v))])  # root: the cluster's administrator
    assert tick_until(ex, lambda: all(contract(ex, x)["state"] not in OPEN for x in (v, o)))
    cv, co = contract(ex, v), contract(ex, o)
    assert (cv["state"], cv["escrow"]) == ("failed", "held")
    assert "CANCELLED by 0 (not by the job's account)" in cv["note"], cv["note"]
    assert (co["state"], co["escrow"]) == ("delivered", "held"), co["note"]
    assert co["note"].startswith("the job exited by itself")
    for x in (v, o):
        (job, _), = stamps(data, x)
        assert ended_in_slurm(job) and slurm_state(job).startswith("CANCELLED")
    clock.set(tau)
    ex.tick()
    assert (contract(ex, v)["escrow"], contract(ex, o)["escrow"]) == ("refunded", "paid")
    bal = ex.store.balances()
    assert (bal["user:u1"], bal["provider:cluster"], bal[egg.ESCROW]) == (99 * MICRO, MICRO, 0)
    assert rel(ex)["cluster"] == (0.5, 1, 2)
    check(ex)


def test_a_slurm_job_running_at_tau_is_stopped_and_paid_and_one_left_pending_is_refunded(eggslurm):
    """One contract's job takes the partition's 8 CPUs and runs past tau*: stopped by the
    exchange ("ran until tau*"), paid; a second contract's job waits in Slurm for CPUs until
    tau*: "the provider had not started the job by tau*", refunded, cancelled in Slurm (even if
    Slurm starts it on the CPUs the first one's stop frees, before the exchange cancels it)."""
    ex, clock, data = eggslurm
    hog = bid(ex, f"{STAMP}; sleep 300", cpu=8)["contract"]
    assert tick_until(ex, lambda: contract(ex, hog)["state"] == "running" and stamps(data, hog))
    waiting = bid(ex, f"{STAMP}; sleep 300")["contract"]  # node `main` is full: it goes on `spare`
    assert contract(ex, waiting)["node_id"] != contract(ex, hog)["node_id"]
    assert tick_until(ex, lambda: contract(ex, waiting)["state"] == "running")
    queued = slurm_id(data, waiting)
    assert wait_for(lambda: slurm_state(queued) == "PENDING", HANG)
    tau = contract(ex, hog)["tau"]
    assert contract(ex, waiting)["tau"] == tau
    clock.set(tau)
    ex.tick()
    h, w = contract(ex, hog), contract(ex, waiting)
    assert (h["state"], h["escrow"], h["settled_t"]) == ("delivered", "paid", tau), h["note"]
    assert h["note"].startswith("ran until tau*")
    assert (w["state"], w["escrow"]) == ("failed", "refunded")
    assert w["note"].startswith("the provider had not started the job by tau*")
    (job, _), = stamps(data, hog)
    assert ended_in_slurm(job) and slurm_state(job).startswith("CANCELLED")  # the exchange's stop
    assert ended_in_slurm(queued) and slurm_state(queued).startswith("CANCELLED")
    bal = ex.store.balances()
    assert (bal["user:u1"], bal["provider:cluster"], bal[egg.ESCROW]) == (99 * MICRO, MICRO, 0)
    assert rel(ex)["cluster"] == (0.5, 1, 2)
    check(ex)
