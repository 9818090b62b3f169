"""The live market on a real Slurm cluster (scripts/slurm-up.sh): Slurm's priorities carry the
market's order, preemption by scontrol suspend/resume, ledger equal to the mechanism's payments,
jobs Slurm kills reported as such, kill -9 of the broker loses nothing.

Run when Slurm answers (``sinfo``); skipped otherwise, except with ``MARKETSCHED_SLURM=1`` (CI),
where a missing cluster fails the tests.
"""

import pwd
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from live_helpers import free_port, slurm_broker, slurm_cancel_and_wait, wait_for, work
from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.live.replay import simulate_recorded
from marketsched.platform.slurm import SlurmExecutor, parse_scontrol, priority_of, run

STEP = 0.2
HANG = 300.0  # waits end when their condition holds; this only guards against a hang








def cancel_and_wait(prefix: str) -> None:
    slurm_cancel_and_wait(prefix, HANG)


@pytest.fixture
def market(cluster, tmp_path):
    brokers = []
    prefixes = []

    def make(**cfg):
        cfg.setdefault("executor", "slurm")
        cfg.setdefault("charge_interval", 0.2)
        if "slots" not in cfg:
            cfg["slots"] = SlurmExecutor(tmp_path / "probe").cpus
        b = Broker(tmp_path / "market", MarketConfig(**{"single_user": True, **cfg})).start()
        b.ensure_admin()
        brokers.append(b)
        prefixes.append(b.executor.job_name(0)[:-1])
        return b

    yield make
    for b in brokers:
        if not b._stopping:
            b.stop(kill_jobs=True)
    for p in prefixes:
        cancel_and_wait(p)


def slurm_state(b, job_id):
    info = b.executor.show(b.job("admin", True, job_id)["pid"] or _proc_id(b, job_id))
    return None if info is None else info["JobState"]


def _proc_id(b, job_id):
    return b.executor.recorded(job_id)[0]


def final_accounting(b, job_id):
    """Slurm's accounting record of a job that has ended, once sacct has it: slurmdbd writes it
    after the controller has seen the end, later on a busy machine."""
    def ended():
        acc = b.executor.accounting(job_id)
        return acc is not None and acc["state"] not in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
    assert wait_for(ended, HANG), b.executor.accounting(job_id)
    return b.executor.accounting(job_id)


def slurm_info(b, job_id):
    return b.executor.show(_proc_id(b, job_id))


def test_priority_mapping_and_scontrol_parsing():
    assert priority_of(2.0) == 2000 and priority_of(2.0004) == 2000 and priority_of(2.0006) == 2001
    assert priority_of(1e-9) == 1 and priority_of(1e12) == 2**31 - 1
    d = parse_scontrol("JobId=5 JobName=ms-x-3 Priority=800 JobState=SUSPENDED Reason=None ExitCode=0:0")
    assert d["JobState"] == "SUSPENDED" and d["Priority"] == "800" and d["JobName"] == "ms-x-3"


def test_higher_bid_overtakes_a_queued_lower_bid_through_slurm_priorities(market, tmp_path):
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    # the market is full of high bids; the test ends one of them to free one CPU, and the rest
    # (and the job that gets the CPU) only once it has seen who got it
    one, rest = tmp_path / "free-one", tmp_path / "free-rest"
    fill = [b.submit("alice", False, 50.0, work(0.4, f"fill{i}", step=STEP, until=one if i == 0 else rest))["id"]
            for i in range(n)]
    low = b.submit("bob", False, 3.0, work(0.4, "low", step=STEP))["id"]
    high = b.submit("bob", False, 4.0, work(0.4, "high", step=STEP, until=rest))["id"]
    assert {b.job("admin", True, j)["state"] for j in (low, high)} == {"queued"}
    # both are pending in Slurm, eligible (no BeginTime gate), ordered by the priorities the
    # market set from the bids: Slurm itself will pick the higher bid when a CPU frees
    lo, hi = slurm_info(b, low), slurm_info(b, high)
    assert lo["JobState"] == hi["JobState"] == "PENDING"
    assert int(hi["Priority"]) == priority_of(4.0) > int(lo["Priority"]) == priority_of(3.0)
    assert "BeginTime" not in (lo["Reason"], hi["Reason"])
    one.touch()
    assert wait_for(lambda: b.job("admin", True, high)["state"] == "running", HANG)
    assert b.job("admin", True, low)["state"] == "queued"
    rest.touch()
    assert wait_for(lambda: all(b.job("admin", True, j)["state"] == "completed" for j in fill + [low, high]), HANG)
    acc = {j: final_accounting(b, j) for j in (fill[0], low, high)}
    # Slurm started the higher bid first (its own record), and the broker agrees
    assert acc[high]["start"] <= acc[low]["start"]
    assert b.job("admin", True, high)["first_start"] < b.job("admin", True, low)["first_start"]
    assert all(a["state"] == "COMPLETED" for a in acc.values())
    assert b.job("admin", True, high)["stdout"] == "done high\n"
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"])


def test_higher_bid_preempts_running_lower_which_resumes_and_completes(market, tmp_path):
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    release = tmp_path / "release"  # the low jobs run until high has ended
    low = [b.submit("alice", False, 2.0, work(0.6, f"low{i}", step=STEP, until=release))["id"] for i in range(n)]
    assert wait_for(lambda: all(slurm_state(b, j) == "RUNNING" for j in low), HANG)
    time.sleep(0.5)
    high = b.submit("bob", False, 10.0, work(1.0, "high", step=STEP))["id"]
    victim = low[-1]  # HB with equal bids: the latest submission is the worst running job
    st = {j["id"]: j["state"] for j in b.jobs("admin", True)}
    assert st[victim] == "preempted" and st[high] == "running"
    assert all(st[j] == "running" for j in low[:-1])
    assert wait_for(lambda: slurm_state(b, victim) == "SUSPENDED", HANG)
    assert wait_for(lambda: slurm_state(b, high) in ("RUNNING", "COMPLETED", "COMPLETING"), HANG)
    assert wait_for(lambda: b.job("admin", True, high)["state"] == "completed", HANG)
    release.touch()
    assert wait_for(lambda: all(b.job("admin", True, j)["state"] == "completed" for j in low + [high]), HANG)
    jobs = [b.job("admin", True, j) for j in low + [high]]
    assert [j["exit_code"] for j in jobs] == [0] * (n + 1)
    v = b.job("admin", True, victim)
    assert v["preemptions"] == 1 and [e["kind"] for e in v["events"]].count("resume") == 1
    assert v["stdout"] == f"done low{n - 1}\n"
    # Slurm's accounting saw the suspension (sacct --json)
    acc = final_accounting(b, victim)
    assert acc["state"] == "COMPLETED" and acc["suspended"] >= 1
    # the ledger is the mechanism's rule (HB, k-th price) on the recorded sequence
    bids = [2.0] * n + [10.0]
    rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], bids, n)
    np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
    assert rec.preemptions.tolist() == [0] * (n - 1) + [1, 0]
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 20_000
    assert books["revenue"] == pytest.approx(sum(j["charged"] for j in jobs), abs=1e-6)


def test_a_bid_change_reorders_slurm_priorities_and_preempts_through_slurm(market, tmp_path):
    b = market()
    n = b.config.slots
    b.add_user(True, "alice", 10_000)
    b.add_user(True, "bob", 10_000)
    # the low jobs run until bob has ended (the test releases them): none ends while bob runs
    release = tmp_path / "release"
    low = [b.submit("alice", False, 2.0, work(0.6, f"low{i}", step=STEP, until=release))["id"] for i in range(n)]
    q2 = b.submit("alice", False, 1.5, work(0.2, "q2", step=STEP))["id"]
    bob = b.submit("bob", False, 1.0, work(0.6, "bob", step=STEP))["id"]
    assert wait_for(lambda: all(slurm_state(b, j) == "RUNNING" for j in low), HANG)
    # a queued bid raised, still below the running ones: only the Slurm priority moves
    b.rebid("alice", False, q2, 1.8)
    assert wait_for(lambda: int(slurm_info(b, q2)["Priority"]) == priority_of(1.8), HANG)
    assert int(slurm_info(b, bob)["Priority"]) == priority_of(1.0)
    # bob outbids the running jobs: HB preempts the worst running one, through Slurm
    time.sleep(0.3)
    assert b.rebid("bob", False, bob, 10.0)["state"] == "running"
    victim = low[-1]
    assert b.job("admin", True, victim)["state"] == "preempted"
    assert wait_for(lambda: slurm_state(b, victim) == "SUSPENDED", HANG)
    assert wait_for(lambda: slurm_state(b, bob) in ("RUNNING", "COMPLETED", "COMPLETING"), HANG)
    assert wait_for(lambda: b.job("admin", True, bob)["state"] == "completed", HANG)
    release.touch()
    assert wait_for(lambda: all(b.job("admin", True, j)["state"] == "completed" for j in low + [q2, bob]), HANG)
    jb = b.job("admin", True, bob)
    assert jb["stdout"] == "done bob\n" and jb["bid"] == 10.0
    # bob ran with the victim (bid 2) and q2 (1.8) queued: HB's k-th price is the best queued
    # bid, 2, for all of its running time
    assert jb["charged"] == pytest.approx(2.0 * jb["run_seconds"], abs=2e-6)
    assert final_accounting(b, victim)["suspended"] >= 1
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 20_000


def test_jobs_slurm_kills_are_reported_failed_and_exit_codes_kept(market):
    b = market()
    b.add_user(True, "alice", 1000)
    doomed = b.submit("alice", False, 2.0, work(20.0, step=STEP))["id"]
    bad = b.submit("alice", False, 2.0, "exit 3")["id"]
    assert wait_for(lambda: slurm_state(b, doomed) == "RUNNING", HANG)
    run(["scancel", str(_proc_id(b, doomed))])  # someone else than the market kills it
    assert wait_for(lambda: b.job("admin", True, doomed)["state"] == "failed", HANG)
    assert "slurm: CANCELLED" in b.job("admin", True, doomed)["note"]
    assert wait_for(lambda: b.job("admin", True, bad)["state"] == "completed", HANG)
    j = b.job("admin", True, bad)
    assert j["exit_code"] == 3 and "FAILED" in j["note"]
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"])


def test_kill_9_of_the_broker_and_restart_lose_nothing(cluster, tmp_path):
    from marketsched.live.cli import Client
    from marketsched.platform.ledger import Store

    data = tmp_path / "market"
    runs = tmp_path / "runs.log"
    runs.touch()
    slots = SlurmExecutor(tmp_path / "probe").cpus
    prefix = SlurmExecutor(data / "jobs").job_name(0)[:-1]
    port = free_port()
    log = open(tmp_path / "broker.log", "ab")
    procs = []

    release = tmp_path / "release"

    def cmd(seconds):
        # runs at least ``seconds`` and until the test releases it (after the restart): the jobs
        # running at the crash are still running when the new broker re-attaches them
        n = round(seconds / STEP)
        return (f'echo "start $MARKETSCHED_JOB_ID" >> {runs}; i=0; while [ $i -lt {n} ] || [ ! -e {release} ]; '
                f'do sleep {STEP}; i=$((i+1)); done; echo "end $MARKETSCHED_JOB_ID" >> {runs}')

    try:
        procs.append(slurm_broker(data, port, log, slots))
        admin = Client(f"http://127.0.0.1:{port}", (data / "admin.token").read_text().strip())
        a = Client(admin.url, admin.post("/api/users", {"name": "a", "deposit": 10_000})["token"])
        ids = [a.post("/api/jobs", {"bid": 2.0 + (i % 3), "command": cmd(2.0 + 0.2 * i)})["id"]
               for i in range(slots + 3)]
        assert wait_for(lambda: runs.read_text().count("start") >= slots - 1, HANG)
        time.sleep(0.5)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        time.sleep(1.0)
        procs.append(slurm_broker(data, port, log, slots))
        release.touch()
        assert wait_for(lambda: all(j["state"] == "completed" for j in admin.get("/api/jobs")), HANG), \
            admin.get("/api/jobs")
        jobs = admin.get("/api/jobs")
        assert sorted(j["id"] for j in jobs) == sorted(ids)  # nothing accepted is lost
        text = runs.read_text().split("\n")
        for i in ids:  # each job ran exactly once (Slurm kept the processes across the crash)
            assert text.count(f"start {i}") == 1 and text.count(f"end {i}") == 1, (i, text)
        assert all(j["exit_code"] == 0 for j in jobs)
        procs[-1].send_signal(signal.SIGTERM)
        procs[-1].wait(timeout=HANG)
        store = Store(data)
        books = store.check_books()  # double entry holds after the crash
        assert books["users"] + books["revenue"] == books["deposits"] == 10_000 * 1_000_000
        charged = store.charged_by_job()
        assert sum(charged.values()) == books["revenue"]
        assert any(e["kind"] == "reattach" for e in store.events())
        store.close()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()
        cancel_and_wait(prefix)


# ---------------------------------------------------------------------------- multi-user
def test_jobs_are_submitted_as_their_owners_unix_accounts(cluster, accounts, open_dir, monkeypatch):
    """Multi-user market on Slurm: the broker (root) submits each job with sbatch --uid/--gid
    of its owner's account; Slurm's record says so (UserId), the job runs as that account with
    the market's clean environment, and its files belong to it."""
    monkeypatch.setenv("MARKETSCHED_TOKEN", "the-broker-environment-secret")
    b = Broker(open_dir / "market", MarketConfig(executor="slurm", single_user=False, slots=2,
                                                 charge_interval=0.2)).start()
    try:
        b.ensure_admin()
        b.add_user(True, "alice", 100, unix=accounts[0])
        b.add_user(True, "bob", 100, unix=accounts[1])
        b.add_user(True, "carol", 100)  # no Unix account: refused in a multi-user market
        with pytest.raises(MarketError, match="no Unix account"):
            b.submit("carol", False, 1.0, "true")
        cmd = "id -un; env | grep -c the-broker-environment-secret; " + work(2.0)
        ids = {name: b.submit(name, False, 2.0, cmd)["id"] for name in ("alice", "bob")}
        for name, unix in zip(("alice", "bob"), accounts):
            j = ids[name]
            assert wait_for(lambda j=j: b.job("admin", True, j)["state"] == "running", 60)
            info = b.executor.show(b.job("admin", True, j)["pid"])
            uid = pwd.getpwnam(unix).pw_uid
            assert info["UserId"] == f"{unix}({uid})", info
        assert wait_for(lambda: all(b.job("admin", True, j)["state"] == "completed" for j in ids.values()), 90)
        for name, unix in zip(("alice", "bob"), accounts):
            j = b.job("admin", True, ids[name])
            assert j["stdout"].splitlines()[:2] == [unix, "0"], j["stdout"]  # its account; nothing of ours
            wd = b.executor.workdir(ids[name])
            assert wd.stat().st_uid == pwd.getpwnam(unix).pw_uid and wd.stat().st_mode & 0o777 == 0o700
            assert (wd / "stdout").stat().st_uid == pwd.getpwnam(unix).pw_uid
    finally:
        prefix = b.executor.job_name(0)[:-1]
        b.stop(kill_jobs=True)
        cancel_and_wait(prefix)


LOGIN_FILES = (".profile", ".bash_profile", ".bash_login", ".bashrc")
# Slurm's own variables besides SLURM_* (measured on 22.05) and the shell's
SLURM_ADDS = {"ENVIRONMENT", "HOSTNAME", "SLURMD_NODENAME", "TMPDIR", "PWD", "OLDPWD"}


def test_a_job_starts_with_the_documented_environment_and_no_login_shell(cluster, accounts, open_dir):
    """The job's environment is the executor's (job_environment: PATH, HOME, USER, LOGNAME, SHELL,
    LANG, the market's variables) plus Slurm's own; no login shell runs for it (slurmd's
    ``su - ACCOUNT``, which --export=VARS would cause): the account's start-up files, each of
    which writes a marker, are never read."""
    from marketsched.platform.executor import RunAs, job_environment

    unix = accounts[0]
    home = Path(pwd.getpwnam(unix).pw_dir)
    marker = home / "login-shell-ran"
    for name in LOGIN_FILES:
        (home / name).write_text(f"echo {name} >> {marker}\nexport FROM_LOGIN=1\n")
    b = Broker(open_dir / "market", MarketConfig(executor="slurm", single_user=False, slots=2,
                                                 charge_interval=0.2)).start()
    try:
        b.ensure_admin()
        b.add_user(True, "alice", 100, unix=unix)
        j = b.submit("alice", False, 2.0, "env")["id"]
        assert wait_for(lambda: b.job("admin", True, j)["state"] == "completed", 90), b.job("admin", True, j)
        out = b.job("admin", True, j)["stdout"]
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        assert not marker.exists(), marker.read_text()
        ours = {k: v for k, v in env.items() if not k.startswith("SLURM_") and k not in SLURM_ADDS}
        assert ours == job_environment(RunAs.lookup(unix), {"MARKETSCHED_JOB_ID": str(j)})
    finally:
        prefix = b.executor.job_name(0)[:-1]
        b.stop(kill_jobs=True)
        cancel_and_wait(prefix)
        for name in LOGIN_FILES:
            (home / name).unlink(missing_ok=True)
