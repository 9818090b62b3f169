"""kill -9 the broker mid-run and restart it: nothing accepted is lost, no job runs twice
(except one whose process vanished without an exit code, which is requeued, as specified),
processes that still run are re-attached, and balances plus revenue still equal deposits."""

import os
import signal
from pathlib import Path

import pytest

from live_helpers import BrokerRestarts, user_clients, wait_for
from marketsched.platform.executor import proc_start_ticks
from marketsched.platform.ledger import Store


def gated_cmd(log: Path, release: Path, step=0.05):
    """A job that runs until ``release`` exists (the test decides, not the clock)."""
    return (f'echo "start $MARKETSCHED_JOB_ID" >> {log}; while [ ! -e {release} ]; do sleep {step}; done; '
            f'echo "end $MARKETSCHED_JOB_ID" >> {log}')


def started(log: Path, *ids):
    """Every job of ``ids`` has written its start line."""
    lines = log.read_text().splitlines()
    return all(f"start {j}" in lines for j in ids)


def job_cmd(log: Path, seconds: float, step=0.05, until: Path | None = None):
    """A job running ``seconds`` (and, with ``until``, until that file exists)."""
    n = round(seconds / step)
    loop = f"[ $i -lt {n} ]" + ("" if until is None else f" || [ ! -e {until} ]")
    return (f'echo "start $MARKETSCHED_JOB_ID" >> {log}; i=0; while {loop}; do sleep {step}; i=$((i+1)); done; '
            f'echo "end $MARKETSCHED_JOB_ID" >> {log}')






def test_kill_9_and_restart(tmp_path):
    runs = tmp_path / "runs.log"
    runs.touch()
    with BrokerRestarts(tmp_path, "--slots", 2, "--charge-interval", 0.2, "--single-user") as brokers:
        admin = brokers.start()
        a, b = user_clients(admin, ("a", "b"), 100).values()

        def state(j):
            return admin.get(f"/api/jobs/{j}")["state"]

        j1 = a.post("/api/jobs", {"bid": 1, "command": job_cmd(runs, 0.1)})["id"]  # done before the crash
        assert wait_for(lambda: state(j1) == "completed")
        # every job that must still run at some point runs until the test releases it: the order
        # of events is the test's, whatever the machine's load
        release = tmp_path / "release"  # after the restart
        j4 = a.post("/api/jobs", {"bid": 2, "command": job_cmd(runs, 1.5, until=release)})["id"]  # preempted at the crash
        j5 = b.post("/api/jobs", {"bid": 2.5, "command": job_cmd(runs, 1.0, until=release)})["id"]  # preempted, then lost
        assert wait_for(lambda: started(runs, j4, j5))
        j2 = b.post("/api/jobs", {"bid": 3, "command": gated_cmd(runs, release)})["id"]  # running at the crash
        down = tmp_path / "release-j3"  # while the broker is down
        j3 = a.post("/api/jobs", {"bid": 4, "command": f'echo "start $MARKETSCHED_JOB_ID" >> {runs}; '
                                                         f'while [ ! -e {down} ]; do sleep 0.05; done'})["id"]
        j6 = b.post("/api/jobs", {"bid": 1.5, "command": job_cmd(runs, 0.2)})["id"]  # queued, never started
        before = {j["id"]: j for j in admin.get("/api/jobs")}
        assert {j: before[j]["state"] for j in (j2, j3, j4, j5, j6)} == {
            j2: "running", j3: "running", j4: "preempted", j5: "preempted", j6: "queued"}
        assert wait_for(lambda: started(runs, j2, j3))

        brokers.kill_9()
        # while the broker is down: j3 ends and its wrapper records the exit code; j5's process
        # group disappears without one (killed by someone); j2 runs on (until the test releases
        # it, after the restart)
        down.touch()
        os.killpg(before[j5]["pid"], signal.SIGKILL)
        assert proc_start_ticks(before[j2]["pid"]) is not None  # j2 runs on
        assert wait_for(lambda: proc_start_ticks(before[j3]["pid"]) is None, 120)  # j3 ended (and was reaped)

        brokers.start()
        after = {j["id"]: j for j in admin.get("/api/jobs")}
        assert sorted(after) == sorted([j1, j2, j3, j4, j5, j6])  # nothing accepted was lost
        assert {j: after[j]["bid"] for j in after} == {j1: 1, j2: 3, j3: 4, j4: 2, j5: 2.5, j6: 1.5}
        assert after[j3]["state"] == "completed" and after[j3]["exit_code"] == 0
        assert "broker was down" in after[j3]["note"]
        assert after[j2]["pid"] == before[j2]["pid"] and after[j2]["state"] == "running"  # re-attached
        assert after[j4]["pid"] == before[j4]["pid"]  # re-attached, still stopped or resumed
        kinds5 = [e["kind"] for e in admin.get(f"/api/jobs/{j5}")["events"]]
        assert "requeue" in kinds5
        kinds2 = [e["kind"] for e in admin.get(f"/api/jobs/{j2}")["events"]]
        assert "reattach" in kinds2

        release.touch()
        assert wait_for(lambda: all(j["state"] == "completed" for j in admin.get("/api/jobs")), 120)
        final = {j["id"]: j for j in admin.get("/api/jobs")}
        starts = [line.split()[1] for line in runs.read_text().splitlines() if line.startswith("start")]
        ends = [line.split()[1] for line in runs.read_text().splitlines() if line.startswith("end")]
        # no job ran twice, except j5, whose process was lost and which was requeued from the start
        assert sorted(starts) == sorted(map(str, [j1, j2, j3, j4, j5, j5, j6]))
        assert sorted(ends) == sorted(map(str, [j1, j2, j4, j5, j6]))
        assert {j: final[j]["attempts"] for j in final} == {j1: 1, j2: 1, j3: 1, j4: 1, j5: 2, j6: 1}
        assert all(j["exit_code"] == 0 for j in final.values())
        bal = admin.get("/api/balance")
        assert sum(u["balance"] for u in bal["users"].values()) + bal["revenue"] == pytest.approx(bal["deposits"])
        assert bal["deposits"] == 200
    # the books balance exactly, in micro-units, and every charge is a job's
    store = Store(brokers.data)
    books = store.check_books()
    assert books["users"] + books["revenue"] == books["deposits"] == 200_000_000
    charged = store.charged_by_job()
    assert {j["id"]: j["charged"] for j in store.jobs() if j["charged"]} == charged
    store.close()
