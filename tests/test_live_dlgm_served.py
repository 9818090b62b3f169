"""DLGM and P-DLGM served by the live market (``market serve --mechanism dlgm|pdlgm``): end to
end through the HTTP API and the command line with real processes, the spot path refused, and
the served run's record replayed through the simulator."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from live_helpers import add_users, market_cli, serve_market, stop_served, user_clients, wait_for
from marketsched.cli import main
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.cli import Client, ClientError
from marketsched.live.dlgm_service import DLGMService, replay_recorded
from marketsched.platform.ledger import MICRO


def serve(tmp_path, preemptive, slots=2):
    return serve_market(tmp_path, "dlgm", DLGMService, preemptive, slots=slots)


@pytest.fixture
def pdlgm(tmp_path):
    srv = serve(tmp_path, True)
    yield srv
    stop_served(srv)


def test_pdlgm_served_end_to_end_http_and_cli_replays_equal_to_the_simulator(pdlgm, tmp_path):
    """Two nodes. alice's A and bob's B (weight 1, reported 1000 s, each runs until the test
    releases it) take nodes 0 and 1. The quote for a job of weight 4 and 500 s shows, on each
    node, completion now + 500 and payment 1 * 500 (it would preempt the running job, whose ratio
    on its remaining time is below 4/500); carol's job takes node 0 (lowest node on the tie),
    preempts A and pays alice 500; when it ends, A resumes. The run's record replays through the
    simulator to the same nodes, starts, preemptions and money; the jobs, released before their
    reported times, end earlier than the simulator's, and the replay says so. (Every event's
    order is the test's: no reported run time ends during the test.)"""
    srv = pdlgm
    b = srv.broker
    admin = Client(srv.url, b.admin_token)
    tok = add_users(admin, ("alice", "bob", "carol"), 1000)
    alice, bob = Client(srv.url, tok["alice"]), Client(srv.url, tok["bob"])
    release = tmp_path / "release"
    gated = f"while [ ! -e {release} ]; do sleep 0.05; done"
    # the spot market is closed on a DLGM market
    with pytest.raises(ClientError, match="runs PDLGM") as exc:
        alice.post("/api/jobs", {"bid": 1, "command": "true"})
    assert exc.value.status == 409
    a = alice.post("/api/dlgm/jobs", {"weight": 1, "runtime": 1000, "command": gated})
    bj = bob.post("/api/dlgm/jobs", {"weight": 1, "runtime": 1000, "command": gated})
    assert (a["node"], a["state"], bj["node"], bj["state"]) == (0, "running", 1, "running")

    run = market_cli(srv, tok["carol"])
    q = run("quote", "--bid", "4", "--runtime", "500", "--json")
    import json

    rows = json.loads(q)["nodes"]
    assert [(r["node"], r["payment"]) for r in rows] == [(0, 500.0), (1, 500.0)]
    assert all(r["completion"] == rows[0]["completion"] and r["utility"] == -4 * r["completion"] - 500 for r in rows)
    assert "node" in run("quote", "--bid", "4", "--runtime", "500")
    release_c = tmp_path / "release-c"
    out = run("submit", "--bid", "4", "--runtime", "500", "--", f"while [ ! -e {release_c} ]; do sleep 0.05; done")
    assert out.startswith("job 3 running on node 0; compensations 500 to 1 job(s)"), out
    status = run("status")
    assert "node 0: job 3 (carol, weight 4)" in status and "queue: 1 (alice" in status, status
    assert "node 1: job 2 (bob, weight 1)" in status, status
    assert alice.get("/api/dlgm/jobs/1")["state"] == "preempted"
    with pytest.raises(ClientError) as exc:  # one's own jobs only
        alice.get("/api/dlgm/jobs/3")
    assert exc.value.status == 404
    page = Client(srv.url, tok["carol"]).get("/api/market")
    assert [n["running"]["id"] for n in page["dlgm"]["nodes"]] == [3, 2]

    release_c.touch()
    assert wait_for(lambda: admin.get("/api/dlgm/jobs/3")["state"] == "completed")
    assert wait_for(lambda: admin.get("/api/dlgm/jobs/1")["state"] == "running")
    assert [e["kind"] for e in admin.get("/api/dlgm/jobs/1")["events"]] == ["node", "start", "preempt", "resume"]
    release.touch()
    assert wait_for(lambda: {admin.get(f"/api/dlgm/jobs/{j}")["state"] for j in (1, 2)} == {"completed"})
    assert b.books()["deposits"] == 3000 and b.books()["revenue"] == 0
    assert admin.get("/api/balance")["users"]["alice"]["balance"] == 1500

    r = replay_recorded(b.store)
    live, sim = r["live"], r["simulated"]
    assert live["node"] == sim["node"] == [0, 1, 0]
    assert live["first_start"] == sim["first_start"]
    assert live["preemptions"] == sim["preemptions"] == [1, 0, 0]
    assert live["paid"] == sim["paid"] == {"alice": -500 * MICRO, "bob": 0, "carol": 500 * MICRO}
    assert [(j, f) for j, f, *_ in r["differ"]] == [(1, "end"), (2, "end"), (3, "end")]


@pytest.mark.parametrize("preemptive", [False, True])
def test_served_run_with_every_job_stopped_replays_equal(tmp_path, preemptive):
    """Jobs that all outlive their reported run times (stopped then), on two nodes, submitted
    through the API as fast as it answers: whatever the timing, the recorded run replays
    through the simulator to the same nodes, starts, ends, preemptions and money, exactly."""
    srv = serve(tmp_path, preemptive)
    try:
        admin = Client(srv.url, srv.broker.admin_token)
        users = user_clients(admin, ("alice", "bob", "carol"), 50)
        script = [("alice", 1, 0.6), ("bob", 1, 0.5), ("carol", 3, 0.2), ("alice", 2, 0.3), ("bob", 5, 0.1)]
        for u, w, d in script:
            users[u].post("/api/dlgm/jobs", {"weight": w, "runtime": d, "command": "sleep 100"})
        assert wait_for(lambda: {j["state"] for j in admin.get("/api/dlgm")["jobs"]} == {"stopped"})
        r = replay_recorded(srv.broker.store)
        assert r["live"] == r["simulated"] and r["differ"] == []
        srv.broker.store.check_books()
    finally:
        stop_served(srv)


def test_mechanisms_say_how_dlgm_runs_live():
    for name in ("dlgm", "pdlgm"):
        out = " ".join(CliRunner().invoke(main, ["mechanisms", name]).output.split())
        assert "market serve --mechanism dlgm" in out and "market quote" in out and "not yet" not in out


# (release, weight, reported run time) on two nodes, each job its own owner (the example of
# tests/test_live_dlgm_crash.py)
AUDIT_SCRIPT = [(0, 1.0, 8.0), (1, 1.0, 6.0), (2, 1.5, 4.0), (3, 4.0, 2.0), (4, 1.0, 1.0), (4.5, 3.0, 1.0)]


def live_utility(tmp_path, focal: int, factor: float, preemptive: bool) -> float:
    """Job ``focal`` (1-based) reports its weight times ``factor`` to a served market (it picks
    its node by its true weight, as the audit's jobs do: ``node_choice=true``); the others are
    truthful. Returns its true utility ``-w (end - release) - (paid - received)``, its money
    read from the ledger (micro-units)."""
    from marketsched.platform.clock import FakeClock
    from test_live_exactly_once import ScriptedExecutor

    clock = FakeClock(0.0)
    b = Broker(tmp_path / "market", MarketConfig(slots=2, single_user=True), clock=clock,
               executor=ScriptedExecutor(tmp_path / "jobs"))
    b.ensure_admin()
    for i in range(len(AUDIT_SCRIPT)):
        b.add_user(True, f"u{i + 1}", 1000)
    svc = b.dlgm = DLGMService(b, preemptive, executor=ScriptedExecutor(tmp_path / "dlgm"))
    for i, (t, w, d) in enumerate(AUDIT_SCRIPT, 1):
        while svc.market.next_stop() <= t:
            clock.set(svc.market.next_stop())
            svc.step()
        clock.set(t)
        node = svc.quote(w, d)["nodes"][0]["node"]  # the best node for its true weight
        svc.submit(f"u{i}", w * (factor if i == focal else 1.0), d, "work", node=node)
    while svc.market.next_stop() < float("inf"):
        clock.set(svc.market.next_stop())
        svc.step()
    job = svc.job("admin", True, focal)
    end = next(e["t"] for e in job["events"] if e["kind"] == "stopped")
    net = b.balance[f"u{focal}"] - 1000 * MICRO
    return -AUDIT_SCRIPT[focal - 1][1] * (end - AUDIT_SCRIPT[focal - 1][0]) + net / MICRO


@pytest.mark.parametrize("mechanism,focal,factor", [("dlgm", 3, 3.0), ("dlgm", 3, 0.5), ("pdlgm", 1, 1.5),
                                                    ("pdlgm", 1, 0.5)])
def test_audit_and_live_agree_on_a_weight_misreport(tmp_path, mechanism, focal, factor):
    """`marketsched audit` (paired simulations) and the served market (two runs, truthful
    and lying) give the focal job the same gain from misreporting its weight, to the
    micro-unit: a profitable lie (DLGM: job 3 overstating its weight 3x receives more from the
    job that overtakes it, +3; P-DLGM: job 1 overstating 1.5x, +1.5) and an unprofitable one
    (understating 2x: -1.5 and -2.5). Recorded in docs/dlgm.md."""
    import numpy as np

    from marketsched.analysis import audit as au
    from marketsched.scenario import Jobs
    from marketsched.workloads.workload import Workload

    t, w, d = (list(c) for c in zip(*AUDIT_SCRIPT))
    jobs = Jobs(Workload.from_columns(submit_time=t, runtime=d, procs=None, capacity=2), true_value=np.array(w),
                bid=np.array(w))
    gain = float(au.audit(jobs, mechanism, None, [au.Deviation("value", factor)], job_ids=[focal])["gain"][0])
    live = live_utility(tmp_path / "lie", focal, factor, mechanism == "pdlgm") - \
        live_utility(tmp_path / "truth", focal, 1.0, mechanism == "pdlgm")
    expected = {("dlgm", 3.0): 3.0, ("dlgm", 0.5): -1.5, ("pdlgm", 1.5): 1.5, ("pdlgm", 0.5): -2.5}[mechanism, factor]
    assert gain == pytest.approx(expected, abs=1e-9)
    assert live == pytest.approx(gain, abs=1e-6)


def test_web_page_shows_each_nodes_queue(pdlgm, tmp_path, browser):
    """The market's page, on a P-DLGM market: each node's running job and its queue."""
    from selenium.webdriver.common.by import By

    from browser_helpers import fresh, wait
    from test_live_web import login

    b = pdlgm.broker
    for u in ("alice", "bob"):
        b.add_user(True, u, 1000)
    gated = f"while [ ! -e {tmp_path / 'never'} ]; do sleep 0.05; done"
    b.dlgm.submit("alice", 1, 1000, gated)  # node 0
    b.dlgm.submit("bob", 1, 1000, gated)  # node 1
    b.dlgm.submit("alice", 2, 500, gated, node=1)  # ratio 1/250 > 1/1000: preempts bob's job
    pdlgm_page = f"{pdlgm.url}/"
    browser.get(pdlgm_page)
    login(browser, b.admin_token)

    def text(el_id):
        return fresh(lambda: browser.find_element(By.ID, el_id).text)

    assert wait(browser, lambda d: "0 1 (alice, weight 1.00)" in text("nodes"))
    assert wait(browser, lambda d: "1 3 (alice, weight 2.00)" in text("nodes") and "2 (bob, 0.001)" in text("nodes"))
    assert wait(browser, lambda d: "PDLGM / compensations" in text("mech"))


def test_attacks_on_the_dlgm_routes_change_nothing(pdlgm):
    """Bad fields, unknown fields, a node that does not exist, compensations the owner cannot
    pay, someone else's job, too many jobs, a bad quote: each refused with its status, naming
    the problem; nothing recorded, no money moved."""
    b = pdlgm.broker
    admin = Client(pdlgm.url, b.admin_token)
    eve = Client(pdlgm.url, admin.post("/api/users", {"name": "eve", "deposit": 1})["token"])
    gated = "sleep 100"
    cases = [({"weight": 1, "runtime": 1, "command": "true", "bid": 3}, 400, "bid"),
             ({"weight": 1, "command": "true"}, 400, "runtime"),
             ({"weight": "1", "runtime": 1, "command": "true"}, 400, "bid"),
             ({"weight": 1, "runtime": 0, "command": "true"}, 400, "runtime"),
             ({"weight": 1, "runtime": 1, "command": "true", "node": 2}, 400, "node 2 does not exist"),
             ({"weight": 1, "runtime": 1, "command": ""}, 400, "command"),
             ({"weight": 1, "runtime": 1, "command": "x" * 70000}, 413, "command")]
    for body, status, words in cases:
        with pytest.raises(ClientError, match=words) as exc:
            eve.post("/api/dlgm/jobs", body)
        assert exc.value.status == status, body
    for q, words in (("weight=1", "runtime"), ("weight=x&runtime=1", "weight must be a number"),
                     ("weight=1&runtime=-1", "runtime")):
        with pytest.raises(ClientError, match=words) as exc:
            eve.get("/api/dlgm/quote?" + q)
        assert exc.value.status == 400
    assert admin.get("/api/dlgm")["jobs"] == []
    rich = Client(pdlgm.url, admin.post("/api/users", {"name": "rich", "deposit": 1000})["token"])
    first = rich.post("/api/dlgm/jobs", {"weight": 1, "runtime": 100, "command": gated})["id"]
    rich.post("/api/dlgm/jobs", {"weight": 1, "runtime": 100, "command": gated})
    with pytest.raises(ClientError, match="compensations on node 0 come to 5.000000 but eve holds 1") as exc:
        eve.post("/api/dlgm/jobs", {"weight": 10, "runtime": 5, "command": "true", "node": 0})
    assert exc.value.status == 402
    with pytest.raises(ClientError) as exc:
        eve.get(f"/api/dlgm/jobs/{first}")
    assert exc.value.status == 404
    assert len(admin.get("/api/dlgm")["jobs"]) == 2
    assert [e["kind"] for e in b.store.entries()] == ["deposit", "deposit"]  # no compensation moved
    b.config.max_jobs_per_user = 2
    with pytest.raises(ClientError, match="2 active DLGM jobs") as exc:
        rich.post("/api/dlgm/jobs", {"weight": 1, "runtime": 1, "command": "true"})
    assert exc.value.status == 429
    b.store.check_books()


def test_served_cancel_list_show_wait_and_the_replay_knows_the_cancel(tmp_path):
    """One DLGM node. alice's A runs (held by the test), bob's B (ratio 1/100) queues, carol's C
    (ratio 2) overtakes B and pays bob 1 * 1 = 1. bob lists his jobs and cancels B with
    `market cancel` (no money moves); alice cannot cancel B (404) nor her running A (409), bob
    cannot cancel B twice (409). `market wait --job` returns when A ends; the record replays
    through the simulator, which is told the cancellation, to the same schedule and money."""
    import json
    import os

    srv = serve(tmp_path, False, slots=1)
    try:
        b = srv.broker
        admin = Client(srv.url, b.admin_token)
        tok = {u: admin.post("/api/users", {"name": u, "deposit": 100})["token"] for u in ("alice", "bob", "carol")}
        alice, bob = Client(srv.url, tok["alice"]), Client(srv.url, tok["bob"])
        release = tmp_path / "release"
        a = alice.post("/api/dlgm/jobs", {"weight": 1, "runtime": 1000,
                                          "command": f"while [ ! -e {release} ]; do sleep 0.05; done"})["id"]
        bj = bob.post("/api/dlgm/jobs", {"weight": 1, "runtime": 100, "command": "true"})["id"]
        c = Client(srv.url, tok["carol"]).post("/api/dlgm/jobs", {"weight": 2, "runtime": 1, "command": "true"})
        assert c["transfers"] == [{"job": bj, "amount": 1.0}]
        runner = CliRunner()

        def run(token, *args, code=0):
            env = {"MARKETSCHED_URL": srv.url, "MARKETSCHED_TOKEN": token, "MARKETSCHED_DATA": str(srv.identity_dir)}
            r = runner.invoke(main, ["market", *args], env=env)
            assert r.exit_code == code, r.output
            return r.output

        listed = run(tok["bob"], "list").splitlines()
        assert listed[0].split()[:6] == ["id", "user", "weight", "run", "s", "node"] and len(listed) == 2
        assert listed[1].split()[:6] == [str(bj), "bob", "1", "100", "0", "queued"]
        assert json.loads(run(tok["bob"], "list", "--state", "queued", "--json"))[0]["id"] == bj
        books = admin.get("/api/balance")["users"]
        with pytest.raises(ClientError, match=f"no DLGM job {bj} of yours") as exc:
            alice.post(f"/api/jobs/{bj}/cancel")
        assert exc.value.status == 404
        with pytest.raises(ClientError, match="is running on node 0") as exc:
            alice.post(f"/api/jobs/{a}/cancel")
        assert exc.value.status == 409
        out = run(tok["bob"], "cancel", str(bj))
        assert out.startswith(f"job {bj} cancelled (was queued on node 0); no money moves"), out
        assert "cancelled" in run(tok["bob"], "show", str(bj))
        with pytest.raises(ClientError, match="already ended \\(cancelled\\)") as exc:
            bob.post(f"/api/jobs/{bj}/cancel")
        assert exc.value.status == 409
        assert admin.get("/api/balance")["users"] == books
        assert {u: books[u]["balance"] for u in books if u != "admin"} == {"alice": 100, "bob": 101, "carol": 99}

        data = tmp_path / "wait"
        data.mkdir()
        (data / "ready").write_text(json.dumps({"pid": os.getpid(), "url": srv.url, "socket": str(data / "none")}))
        release.touch()
        out = run(tok["alice"], "wait", "--data", str(data), "--job", str(a), "--timeout", "60")
        assert out.strip() == f"job {a} completed"
        assert wait_for(lambda: admin.get(f"/api/dlgm/jobs/{c['id']}")["state"] in ("completed", "stopped"))
        r = replay_recorded(b.store)
        live, sim = r["live"], r["simulated"]
        assert live["node"] == sim["node"] == [0, 0, 0]
        assert live["first_start"][0] == sim["first_start"][0]
        assert live["first_start"][1] is None and sim["first_start"][1] is None  # B never started
        assert live["end"][1] == sim["end"][1]  # the cancellation, at its time, in both
        assert live["paid"] == sim["paid"] == {"alice": 0, "bob": -MICRO, "carol": MICRO}
        # A ended before its reported time (and so may C, started then): the replay says so
        assert (a, "end") in [(j, f) for j, f, *_ in r["differ"]] and {j for j, *_ in r["differ"]} <= {a, c["id"]}
        b.store.check_books()
    finally:
        srv.shutdown()
        srv.server_close()
        srv.broker.stop(kill_jobs=True)


@pytest.fixture
def on_fake_slurm(tmp_path, monkeypatch):
    """A DLGM market served on a fake Slurm of two nodes (the pattern of
    tests/test_dlgm_slurm_commands.py): DLGM node n is the n-th Slurm node."""
    import marketsched.platform.slurm as slurm
    from marketsched.live.dlgm_slurm import DLGMSlurmExecutor
    from marketsched.live.server import MarketServer

    ids = iter(range(100, 200))

    def run(args, timeout=30.0, input=None, env=None):
        if args[0] == "sinfo" and "%P" in args:
            return "main*\n"
        if args[0] == "sinfo" and "%N %C %t" in args:
            return "alpha 0/2/0/2 idle\nbeta 0/2/0/2 idle\n"
        if args[0] == "sinfo" and "%N" in args:
            return "alpha\nbeta\n"
        if args[0] == "sbatch":
            return f"{next(ids)}\n"
        return ""

    monkeypatch.setattr(slurm, "run", run)
    broker = Broker(tmp_path / "market", MarketConfig(slots=2, single_user=True)).start()
    broker.ensure_admin()
    broker.dlgm = DLGMService(broker, False, executor=DLGMSlurmExecutor(tmp_path / "market" / "dlgm"))
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()
    broker.stop()


def test_the_api_names_each_nodes_slurm_host(on_fake_slurm):
    """On Slurm, each node of `GET /api/dlgm` and of the page's data (`GET /api/market`) names
    its Slurm host, the partition's nodes in sinfo order."""
    admin = Client(on_fake_slurm.url, on_fake_slurm.broker.admin_token)
    alice = Client(on_fake_slurm.url, admin.post("/api/users", {"name": "alice", "deposit": 10})["token"])
    assert alice.post("/api/dlgm/jobs", {"weight": 1, "runtime": 100, "command": "true", "node": 1})["node"] == 1
    for nodes in (alice.get("/api/dlgm")["nodes"], alice.get("/api/market")["dlgm"]["nodes"]):
        assert [(n["node"], n["host"]) for n in nodes] == [(0, "alpha"), (1, "beta")]
        assert nodes[0]["running"] is None and nodes[1]["running"]["owner"] == "alice"


def test_the_page_shows_each_nodes_slurm_host(on_fake_slurm, browser):
    from selenium.webdriver.common.by import By

    from browser_helpers import fresh, wait
    from test_live_web import login

    b = on_fake_slurm.broker
    b.add_user(True, "alice", 10)
    b.dlgm.submit("alice", 1, 100, "true", node=1)
    browser.get(f"{on_fake_slurm.url}/")
    login(browser, b.admin_token)

    def text():
        return fresh(lambda: browser.find_element(By.ID, "nodes").text)

    assert wait(browser, lambda d: "0 (Slurm node alpha) idle" in text())
    assert "1 (Slurm node beta) 1 (alice, weight 1.00)" in text()


@pytest.mark.parametrize("preemptive", [False, True])
def test_a_named_node_other_than_the_best_response_replays_equal(tmp_path, preemptive):
    """Two nodes, real processes (the local executor; market time an injected clock). At 0
    alice's A (weight 1, 4 s) takes node 0; bob's B (weight 1, 2 s) names node 0 although node 1
    is idle and better for it (DLGM: it waits behind A; P-DLGM: it preempts A and pays alice
    1 * 2); carol's C and dave's D take their best nodes. Every job outlives its reported run
    time (stopped then). The record replays through the simulator, told B's named node (and
    only that: the others' nodes stay the policy's own choice, checked), to the same nodes,
    starts, ends, preemptions and payments to the micro-unit; a record claiming another node for
    a job that did not name one does not replay equal."""
    from marketsched.platform.clock import FakeClock

    clock = FakeClock(0.0)
    b = Broker(tmp_path / "market", MarketConfig(slots=2, single_user=True), clock=clock)
    b.ensure_admin()
    for u in ("alice", "bob", "carol", "dave"):
        b.add_user(True, u, 100)
    svc = b.dlgm = DLGMService(b, preemptive)
    try:
        script = [(0.0, "alice", 1.0, 4.0, None), (0.5, "bob", 1.0, 2.0, 0), (1.0, "carol", 2.0, 1.0, None),
                  (1.5, "dave", 3.0, 1.0, None)]
        for t, u, w, d, node in script:
            while svc.market.next_stop() <= t:
                clock.set(svc.market.next_stop())
                svc.step()
            clock.set(t)
            best = svc.quote(w, d)["nodes"][0]["node"]
            assert node is None or node != best  # B names a node other than its best response
            assert svc.submit(u, w, d, "sleep 100", node=node)["node"] == (best if node is None else node)
        assert svc.job("admin", True, 2)["state"] == ("running" if preemptive else "queued")
        while svc.market.next_stop() < float("inf"):
            clock.set(svc.market.next_stop())
            svc.step()
        assert {j["state"] for j in svc.tables.jobs()} == {"stopped"}
        r = replay_recorded(b.store)
        assert r["live"]["node"][:2] == [0, 0]
        assert r["live"] == r["simulated"] and r["differ"] == []
        assert r["live"]["paid"]["bob"] == (2 * MICRO if preemptive else 0)
        b.store.check_books()
        # the policy's own choices stay checked: a record claiming another node for carol's job
        # (not named) replays to the policy's node, and the replay shows the difference
        with b.store.transaction():
            svc.tables.update_job(3, node=1 - r["live"]["node"][2])
            b.store._exec("UPDATE dlgm_events SET detail = ? WHERE job_id = 3 AND kind = 'node'",
                          (str(1 - r["live"]["node"][2]),))
        tampered = replay_recorded(b.store)
        assert tampered["simulated"] == r["simulated"] and tampered["live"]["node"] != r["simulated"]["node"]
    finally:
        svc.stop(kill=True)
