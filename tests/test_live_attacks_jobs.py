"""Attacks by jobs on the live market, against a real broker with real Unix accounts.

The tests create two Unix accounts (``useradd``; removed at the end), map the market users
alice and bob to them, and run the broker in multi-user mode (as root, which CI is): each job
runs as its owner's account, in its own cgroup. Each attack is the one issue 16 saw succeed:

* a job reads the market's secrets (``admin.token``, ``market.db``), another user's job
  folder and home, the broker's environment: denied;
* a job signals the broker or another user's job, or moves itself out of its cgroup: denied;
* a job's ``setsid`` child during preemption and during cancel: frozen with the job, killed with
  it; a sibling job of the same user cannot resume a frozen job with SIGCONT;
* a fork bomb: held to the job's process limit, the other users' jobs and the broker go on;
* kill -9 of the broker during submission bursts: every process that ran is a recorded job,
  run once, and no job id is reused;
* the preempted-then-exited race with real processes: no job runs twice;
* links a job makes in its folder: never followed by ``show`` nor by a relaunch.

Outside CI a normal user skips them (they need root); as root, or with ``CI`` set, a missing
piece (no useradd, no cgroups) is a failure, never a silent skip. No assertion on durations:
every wait is for an event, bounded generously.
"""

from __future__ import annotations

import os
import pwd
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from live_helpers import (
    BOMB,
    chown_tree,
    free_port,
    make_service_account,
    proc_state,
    require_cgroups,
    start_broker,
    wait_for,
)
from marketsched.live.broker import Broker, MarketConfig
from marketsched.platform.executor import kill_recorded_jobs, proc_cpu_seconds, proc_start_ticks
from marketsched.platform.ledger import Store

LOOP = "while :; do :; done"
# the count is written to a temporary file and renamed, so ``count`` is never seen empty: a job
# frozen between ``>``'s truncation and the write would otherwise leave it empty until thawed
COUNT = 'i=0; while :; do i=$((i+1)); echo $i > count.new; mv -f count.new count; sleep 0.05; done'


@pytest.fixture(params=["root", "launcher"])
def market(request, accounts, open_dir):
    """Brokers in multi-user mode: a root broker that starts jobs itself, or one whose jobs go
    through the privileged launcher (a separate root process; the broker here stays in the
    test's process: ``serve --service-user`` below also drops it to a service account)."""
    made = []

    def make(slots=1, **cfg):
        b = Broker(open_dir / "market", MarketConfig(slots=slots, single_user=False, charge_interval=0.2,
                                                     launcher=request.param == "launcher", **cfg))
        require_cgroups(b.executor)
        b.start()
        b.ensure_admin()
        b.add_user(True, "alice", 1000, unix=accounts[0])
        b.add_user(True, "bob", 1000, unix=accounts[1])
        made.append(b)
        return b

    yield make
    for b in made:
        if not b._stopping:
            b.stop(kill_jobs=True)


def state(b, j):
    return b.job("admin", True, j)["state"]


def output(b, j):
    return b.job("admin", True, j)["stdout"]


def job_file(b, j, name):
    p = b.executor.workdir(j) / name
    assert wait_for(lambda: p.exists() and p.read_text().strip(), 60), f"job {j} never wrote {name}"
    return p.read_text().strip()


def frozen_and_still(b, job_id, pids):
    """Every process of the job is frozen: the cgroup says so, none of ``pids`` is running, and
    their CPU time does not move."""
    if not wait_for(lambda: b.executor.frozen(job_id), 60):
        return False
    before = [proc_cpu_seconds(p) for p in pids]
    for _ in range(5):
        if any(proc_state(p) == "R" for p in pids):
            return False
        time.sleep(0.1)
    return [proc_cpu_seconds(p) for p in pids] == before


# ---------------------------------------------------------------------------- reading
def test_a_job_cannot_read_the_market_secrets_nor_another_users_files(market, accounts, monkeypatch):
    monkeypatch.setenv("MARKETSCHED_TOKEN", "the-broker-environment-secret")
    b = market(slots=2)
    data = b.data
    bob_home = Path(pwd.getpwnam(accounts[1]).pw_dir)
    secret = bob_home / "secret"
    secret.write_text("bob's secret\n")
    bob = pwd.getpwnam(accounts[1])
    os.chown(secret, bob.pw_uid, bob.pw_gid)
    os.chmod(secret, 0o600)
    jb = b.submit("bob", False, 1.0, "echo bob-output; sleep 60")["id"]
    assert wait_for(lambda: "bob-output" in output(b, jb), 60)
    targets = {
        "admin.token": data / "admin.token",
        "market.db": data / "market.db",
        "bob's job output": b.executor.workdir(jb) / "stdout",
        "bob's job command": b.executor.workdir(jb) / "command.sh",
        "bob's home file": secret,
        "the broker's environment": f"/proc/{os.getpid()}/environ",
        "the broker's state file": b.executor.root / f"job-{jb}.proc",
    }
    lines = [f'if cat "{p}" > /dev/null 2>&1; then echo "{k}: read"; else echo "{k}: denied"; fi'
             for k, p in targets.items()]
    lines += [f'if ls "{d}" > /dev/null 2>&1; then echo "list {d.name}: read"; else echo "list {d.name}: denied"; fi'
              for d in (data, data / "jobs")]
    # the checks can see a read: the job reads its own files and a world-readable one
    lines += ['echo mine > own; if cat own > /dev/null; then echo "own file: read"; fi',
              'if cat /etc/passwd > /dev/null; then echo "passwd: read"; fi',
              'if env | grep -q the-broker-environment-secret; then echo "env: leaked"; else echo "env: clean"; fi',
              'id -un']
    ja = b.submit("alice", False, 1.0, "\n".join(lines))["id"]
    assert wait_for(lambda: state(b, ja) == "completed", 60)
    out = output(b, ja).splitlines()
    for k in targets:
        assert f"{k}: denied" in out, out
    assert "list market: denied" in out and "list jobs: denied" in out, out
    assert "own file: read" in out and "passwd: read" in out and "env: clean" in out, out
    assert out[-1] == accounts[0]  # it ran as alice's account
    for f in ("admin.token", "market.db"):
        assert (data / f).stat().st_mode & 0o077 == 0


# ---------------------------------------------------------------------------- signals
def test_a_job_cannot_leave_its_cgroup_nor_signal_another_users_job(market, accounts):
    b = market(slots=2)
    jb = b.submit("bob", False, 1.0, COUNT)["id"]
    job_file(b, jb, "count")
    bob_pid = b.job("admin", True, jb)["pid"]
    cg = b.executor.procs[jb].cgroup
    tree = b.executor.layout.track[1].parent
    cmd = "\n".join([
        f'kill -STOP {bob_pid} 2>/dev/null && echo "stop bob: done" || echo "stop bob: denied"',
        f'kill -STOP -{bob_pid} 2>/dev/null && echo "stop bob group: done" || echo "stop bob group: denied"',
        f'kill -KILL {bob_pid} 2>/dev/null && echo "kill bob: done" || echo "kill bob: denied"',
        f'(echo $$ > "{tree}/cgroup.procs") 2>/dev/null && echo "leave cgroup: done" || echo "leave cgroup: denied"',
        f'(echo 1 > "{cg.track}/cgroup.freeze") 2>/dev/null && echo "freeze bob: done" || echo "freeze bob: denied"',
        'cat /proc/self/cgroup',
    ])
    ja = b.submit("alice", False, 1.0, cmd)["id"]
    assert wait_for(lambda: state(b, ja) == "completed", 60)
    out = output(b, ja)
    for what in ("stop bob", "stop bob group", "kill bob", "leave cgroup", "freeze bob"):
        assert f"{what}: denied" in out, out
    assert f"/{b.executor.name}/job-{ja}" in out  # still in its own job's cgroup
    # bob's job runs on, unfrozen
    c1 = int(job_file(b, jb, "count"))
    assert wait_for(lambda: int(job_file(b, jb, "count")) > c1, 60)
    assert state(b, jb) == "running" and not b.executor.frozen(jb)


@pytest.fixture(scope="module")
def service():
    yield from make_service_account()


@pytest.fixture(params=["root", "service-user"])
def broker_account(request):
    """How `serve` runs: as root (None), or started as root with ``--service-user`` (the
    service account's name): the broker drops to it and a privileged launcher starts jobs."""
    return None if request.param == "root" else request.getfixturevalue("service")


def uids_of(pid) -> list[int]:
    """Real, effective, saved and filesystem uids of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return [int(x) for x in next(line for line in status if line.startswith("Uid:")).split()[1:]]


def children_of(pid) -> list[int]:
    return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]


def prepare(data: Path, accounts, service=None) -> dict:
    """A multi-user market's users, made with the broker (then stopped): tokens by name; the
    data folder handed to the ``service`` account if given."""
    b = Broker(data, MarketConfig(single_user=False))
    tokens = {"admin": b.ensure_admin()}
    for name, unix in zip(("alice", "bob"), accounts):
        tokens[name] = b.add_user(True, name, 1e6, unix=unix)["token"]
    b.stop()
    if service is not None:
        chown_tree(data, service)
    return tokens


def serve(data: Path, port: int, log, *extra):
    """A multi-user broker charging every 0.2 s (:func:`live_helpers.start_broker`)."""
    return start_broker(data, port, log, "--multi-user", "--charge-interval", "0.2", *extra)


def test_a_job_cannot_kill_the_broker(accounts, open_dir, broker_account):
    """... nor its privileged launcher; with ``--service-user`` the broker runs as the service
    account (every uid of it) and only the launcher is root."""
    from marketsched.live.cli import Client

    data = open_dir / "market"
    tokens = prepare(data, accounts, broker_account)
    port = free_port()
    extra = ["--service-user", broker_account] if broker_account else []
    with open(open_dir / "broker.log", "ab") as log:
        p = serve(data, port, log, "--slots", "2", "--job-processes", "300", *extra)
        try:
            summary = (open_dir / "broker.log").read_text()
            assert "processes: cgroup" in summary and ", 300 processes" in summary, summary
            targets = {"broker": p.pid}
            if broker_account:
                svc = pwd.getpwnam(broker_account).pw_uid
                assert uids_of(p.pid) == [svc] * 4
                launchers = [c for c in children_of(p.pid) if b"launcherd" in Path(f"/proc/{c}/cmdline").read_bytes()]
                assert len(launchers) == 1 and uids_of(launchers[0]) == [0] * 4
                targets["launcher"] = launchers[0]
                assert (data / "market.db").stat().st_uid == svc and (data / "jobs").stat().st_uid == svc
            else:
                assert uids_of(p.pid) == [0] * 4
            url = f"http://127.0.0.1:{port}"
            alice = Client(url, tokens["alice"])
            cmd = "; ".join(f'kill -{sig} {pid} 2>/dev/null && echo "{sig} {name}: done" || echo "{sig} {name}: denied"'
                            for name, pid in targets.items() for sig in ("KILL", "STOP"))
            j = alice.post("/api/jobs", {"bid": 1, "command": cmd})["id"]
            admin = Client(url, tokens["admin"])
            assert wait_for(lambda: admin.get(f"/api/jobs/{j}")["state"] == "completed", 60)
            out = admin.get(f"/api/jobs/{j}")["stdout"]
            for name in targets:
                assert f"KILL {name}: denied" in out and f"STOP {name}: denied" in out, out
            assert p.poll() is None and all(proc_state(pid) not in ("T", None) for pid in targets.values())
            assert admin.get("/api/health") is not None
            j2 = alice.post("/api/jobs", {"bid": 1, "command": "id -un"})["id"]  # the launcher still starts jobs
            assert wait_for(lambda: admin.get(f"/api/jobs/{j2}")["state"] == "completed", 60)
            assert admin.get(f"/api/jobs/{j2}")["stdout"].strip() == accounts[0]
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)


# ---------------------------------------------------------------------------- setsid escapes
def test_a_setsid_child_is_frozen_on_preemption_and_killed_on_cancel(market):
    b = market(slots=1)
    ja = b.submit("alice", False, 1.0, f"setsid sh -c '{LOOP}' & echo $! > esc; {COUNT}")["id"]
    esc = int(job_file(b, ja, "esc"))
    job_file(b, ja, "count")  # it counts (preempted before its first count, it would have no file)
    main = b.job("admin", True, ja)["pid"]
    assert wait_for(lambda: os.getsid(esc) != os.getsid(main), 60)  # it left the job's session (once setsid ran)
    assert f"/{b.executor.name}/job-{ja}" in Path(f"/proc/{esc}/cgroup").read_text()
    jb = b.submit("bob", False, 5.0, "sleep 600")["id"]  # HB: alice's job is preempted (and stays so)
    assert state(b, ja) == "preempted"
    assert frozen_and_still(b, ja, [esc, main])
    c1 = job_file(b, ja, "count")
    time.sleep(0.3)
    assert job_file(b, ja, "count") == c1
    b.cancel("alice", False, ja)  # cancelled while preempted: the escapee goes with it
    assert wait_for(lambda: proc_start_ticks(esc) is None and proc_start_ticks(main) is None, 60)
    # cancelled while running
    b.cancel("bob", False, jb)
    jc = b.submit("alice", False, 1.0, f"setsid sh -c '{LOOP}' & echo $! > esc; sleep 60")["id"]
    esc2 = int(job_file(b, jc, "esc"))
    assert state(b, jc) == "running" and proc_state(esc2) is not None
    b.cancel("alice", False, jc)
    assert wait_for(lambda: proc_start_ticks(esc2) is None, 60)
    assert b.executor.procs == {}


def test_a_sibling_job_cannot_resume_a_frozen_job_with_sigcont(market):
    b = market(slots=2)
    ja = b.submit("alice", False, 1.0, f"setsid sh -c '{LOOP}' & echo $! > esc; {COUNT}")["id"]
    esc = int(job_file(b, ja, "esc"))
    job_file(b, ja, "count")  # it counts (preempted before its first count, it would have no file)
    main = b.job("admin", True, ja)["pid"]
    # alice's second job keeps sending SIGCONT to her first job's group and to its escapee
    jc = b.submit("alice", False, 3.0, f"while :; do kill -CONT -{main} {main} {esc} 2>/dev/null; "
                                       "echo sent > tried; sleep 0.02; done")["id"]
    jb = b.submit("bob", False, 5.0, "sleep 600")["id"]  # HB preempts the lowest bid: alice's first job
    assert state(b, ja) == "preempted" and state(b, jc) == "running" and state(b, jb) == "running"
    job_file(b, jc, "tried")
    assert frozen_and_still(b, ja, [esc, main])  # SIGCONT does not thaw a frozen cgroup
    c1 = job_file(b, ja, "count")
    time.sleep(0.5)
    assert job_file(b, ja, "count") == c1


# ---------------------------------------------------------------------------- fork bomb
def test_a_fork_bomb_is_held_to_the_jobs_process_limit(market):
    """A job tries to start twice its process limit of sleeping children (bounded: were the
    limit to fail, 2N sleeping processes would do no harm): its cgroup never holds more than N
    tasks, the job sees the forks fail, another user's job and the broker go on, and cancel
    kills every process of it."""
    n = 16
    b = market(slots=3, job_processes=n)
    jb = b.submit("bob", False, 1.0, COUNT)["id"]
    job_file(b, jb, "count")
    ja = b.submit("alice", False, 1.0, BOMB.format(tries=2 * n))["id"]
    assert wait_for(lambda: ja in b.executor.procs, 60)
    cg = b.executor.procs[ja].cgroup
    assert b.executor.layout.pids is not None, "no pids cgroup: the number of processes is not limited"
    limit_dir = b.executor.layout.pids[1] / f"job-{ja}"
    assert limit_dir in cg.dirs()
    assert (limit_dir / "pids.max").read_text().strip() == str(n)
    most = {"tasks": 0, "procs": 0}

    def sample():  # the largest number of tasks the job's cgroups held while it forked
        try:
            most["tasks"] = max(most["tasks"], int((limit_dir / "pids.current").read_text()))
        except (OSError, ValueError):
            pass
        most["procs"] = max(most["procs"], len(cg.pids()))
        return (b.executor.workdir(ja) / "forks").exists()

    assert wait_for(sample, 120, every=0.001), "the fork loop never finished"
    started, failed = map(int, job_file(b, ja, "forks").split())
    assert started + failed == 2 * n and failed >= n and started >= 1, (started, failed)
    sample()
    assert 1 <= most["tasks"] <= n and most["procs"] <= n, most
    assert len(cg.pids()) <= n
    events = limit_dir / "pids.events"
    if events.exists():  # the kernel counts the forks it refused
        assert int(dict(line.split() for line in events.read_text().splitlines())["max"]) >= n
    # another user's job and the broker go on
    c1 = int(job_file(b, jb, "count"))
    assert wait_for(lambda: int(job_file(b, jb, "count")) > c1, 60)
    jc = b.submit("bob", False, 1.0, "echo still-forks")["id"]
    assert wait_for(lambda: state(b, jc) == "completed", 60)
    assert "still-forks" in output(b, jc)
    # cancel kills every process of the bomb and removes its cgroups
    pids = cg.pids()
    assert len(pids) > started  # the children and the job's own shells
    b.cancel("alice", False, ja)
    assert wait_for(lambda: all(proc_start_ticks(p) is None for p in pids), 60)
    assert wait_for(lambda: not any(d.exists() for d in cg.dirs()), 60)
    assert state(b, ja) == "cancelled" and state(b, jb) == "running"


# ---------------------------------------------------------------------------- exactly once
def test_kill_9_of_the_broker_during_submission_bursts(accounts, open_dir, broker_account):
    """Bursts of submissions while the broker is killed with SIGKILL at a random moment, 8 times:
    each job appends ``ID TAG`` to a log when it runs; at the end every line is a recorded job
    with that tag (no execution unrecorded, no id given to two submissions) and appears once.
    With ``--service-user`` the launcher goes with each broker (its socket closes) and a job
    it started but had not given the go never runs."""
    from marketsched.live.cli import Client

    data = open_dir / "market"
    tokens = prepare(data, accounts, broker_account)
    extra = ["--service-user", broker_account] if broker_account else []
    ran = open_dir / "ran.log"
    ran.touch()
    os.chmod(ran, 0o666)  # both accounts' jobs append to it
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    rng = random.Random(16)
    accepted: dict[str, int] = {}  # tag -> id the broker answered
    lock = threading.Lock()
    with open(open_dir / "broker.log", "ab") as log:
        for cycle in range(8):
            p = serve(data, port, log, "--slots", "2", *extra)
            stop = threading.Event()

            def client(i, cycle=cycle, stop=stop):
                c = Client(url, tokens["alice" if i % 2 else "bob"], timeout=10)
                k = 0
                while not stop.is_set():
                    tag = f"c{cycle}t{i}k{k}"
                    k += 1
                    try:
                        job = c.post("/api/jobs", {"bid": round(1 + 9 * rng.random(), 3),
                                                   "command": f'echo "$MARKETSCHED_JOB_ID {tag}" >> {ran}'})
                    except Exception:  # noqa: BLE001 - the broker was killed mid-request
                        continue
                    with lock:
                        accepted[tag] = job["id"]

            threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.3 + rng.random())
            p.send_signal(signal.SIGKILL)
            p.wait()
            stop.set()
            for t in threads:
                t.join()
        p = serve(data, port, log, "--slots", "2", *extra)
        try:
            admin = Client(url, tokens["admin"], timeout=30)
            assert wait_for(lambda: admin.get("/api/price")["running"] + admin.get("/api/price")["queued"] == 0, 300)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
    store = Store(data)
    try:
        jobs = {j["id"]: j for j in store.jobs()}
        books = store.check_books()
    finally:
        store.close()
    lines = [tuple(line.split()) for line in ran.read_text().splitlines()]
    assert len(accepted) > 20 and len(jobs) >= len(accepted)
    assert all(len(x) == 2 for x in lines), lines
    ids = [int(i) for i, _ in lines]
    tags = [t for _, t in lines]
    assert len(set(tags)) == len(tags), "a submission ran twice"
    assert len(set(ids)) == len(ids), "a job id ran twice (or was given to two submissions)"
    for i, tag in lines:  # every process that ran is a recorded job, with its own command
        assert int(i) in jobs, f"job {i} ran but is not in the database"
        assert jobs[int(i)]["command"].endswith(f"{tag}\" >> {ran}"), (i, tag, jobs[int(i)]["command"])
    for tag, i in accepted.items():  # every accepted submission is stored under the id it got
        assert tag in jobs[i]["command"]
    assert all(j["state"] == "completed" and j["exit_code"] == 0 for j in jobs.values())
    assert sorted(ids) == sorted(jobs)  # and every recorded job ran, exactly once
    assert books["users"] + books["revenue"] == books["deposits"]


def test_preempted_jobs_whose_processes_ended_never_run_again(market, open_dir):
    """HB with one slot and rising bids: every arrival preempts the running job, often just as
    it ends (the race of issue 16, deterministic in test_live_exactly_once.py); with real
    processes, no job runs twice and each is started once."""
    b = market(slots=1)
    ran = open_dir / "ran.log"
    ran.touch()
    os.chmod(ran, 0o666)
    ids = [b.submit("alice", False, 1.0 + k, f'echo "$MARKETSCHED_JOB_ID" >> {ran}')["id"] for k in range(60)]
    assert wait_for(lambda: all(state(b, j) == "completed" for j in ids), 300)
    assert wait_for(lambda: b.executor.procs == {}, 60)
    assert sorted(int(x) for x in ran.read_text().split()) == ids
    assert [b.job("admin", True, j)["attempts"] for j in ids] == [1] * len(ids)


# ---------------------------------------------------------------------------- links
def test_links_a_job_makes_in_its_folder_are_not_followed(market, open_dir):
    canary = open_dir / "canary"
    canary.write_text("CANARY\n")
    shadow = Path("/etc/shadow").read_bytes() if Path("/etc/shadow").exists() else None
    b = market(slots=2)
    # job 1 points command.sh at a root-owned file (on its first run only: a relaunched job 1
    # that linked again would race the check below); job 2 points stdout at /etc/shadow and
    # makes stderr a FIFO (which would block a reader or writer that opened it blindly)
    j1 = b.submit("alice", False, 1.0, f"[ -e done ] || ln -sf {canary} command.sh; echo linked > done; sleep 60")["id"]
    j2 = b.submit("alice", False, 1.0, "rm -f stdout stderr; ln -s /etc/shadow stdout; mkfifo stderr; "
                                       "echo linked > done; sleep 60")["id"]
    job_file(b, j1, "done")
    job_file(b, j2, "done")
    view = b.job("alice", False, j2)
    assert "symbolic link" in view["stdout"] and "root:" not in view["stdout"]
    assert "not a regular file" in view["stderr"]
    # the broker stops (jobs suspended), their processes die while it is down (no exit code),
    # and a new broker requeues and relaunches them: through the links?
    b.stop()
    kill_recorded_jobs(b.data)
    b2 = Broker(b.data, MarketConfig(slots=2, single_user=False, charge_interval=0.2, launcher=b.config.launcher)).start()
    try:
        assert wait_for(lambda: b2.job("admin", True, j1)["state"] in ("running", "completed"), 60)
        assert wait_for(lambda: b2.job("admin", True, j2)["state"] == "failed", 60)
        assert "stdout is a symbolic link" in b2.job("admin", True, j2)["note"]
        assert canary.read_text() == "CANARY\n"  # command.sh was replaced, not written through
        assert not (b2.executor.workdir(j1) / "command.sh").is_symlink()
        if shadow is not None:
            assert Path("/etc/shadow").read_bytes() == shadow
        assert b2.job("admin", True, j1)["attempts"] == 2 and b2.job("admin", True, j2)["attempts"] == 2
    finally:
        b2.stop(kill_jobs=True)
