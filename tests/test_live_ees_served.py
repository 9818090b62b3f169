"""EES and relaxed EES served by the live market (``market serve --mechanism ees|relaxed-ees``):
end to end through the HTTP API and the command line with real processes, a discarded head
told why, the payments on the ledger, the spot path refused, attacks refused, and the served
run's record replayed through the simulator to the same decisions and payments."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from live_helpers import (
    BrokerRestarts,
    add_users,
    market_cli,
    serve_market,
    stop_served,
    user_clients,
    wait_for,
)
from marketsched.cli import main
from marketsched.live.cli import Client, ClientError
from marketsched.live.ees import simulate_recorded
from marketsched.live.ees_service import EESService
from marketsched.platform.ledger import MICRO, Store
from marketsched.platform.validation import to_micro

ENDED = ("completed", "stopped", "discarded", "cancelled")


def serve(tmp_path, mechanism, slots=2):
    return serve_market(tmp_path, "ees", EESService, mechanism, slots=slots)


@pytest.fixture
def ees(tmp_path):
    srv = serve(tmp_path, "ees")
    yield srv
    stop_served(srv)


def replays_equal(market) -> bool:
    """The served run's decisions and payments are the simulator's on the recorded arrivals."""
    sim_policy, _ = simulate_recorded(market)
    sim = [(d.job_ids.tolist(), d.runs, d.payments.tolist()) for _, _, d in sim_policy.ledger.rows]
    live = [(d["rows"], d["runs"], d["payments"]) for d in market.decisions()]
    return len(live) > 0 and sim == live


def paid_by_owner(market) -> dict[str, int]:
    """Each owner's payments, micro-units: every decision's payment of each queued job, rounded
    once (the ledger's amounts, computed from the decision records)."""
    out: dict[str, int] = {}
    for d in market.decisions():
        for job, mu in zip(d["jobs"], d["payments"]):
            owner = market.owner[market.job_row[job]]
            out[owner] = out.get(owner, 0) + to_micro(mu)
    return out


def test_ees_served_discards_a_head_below_its_delay_tells_why_and_replays_equal(ees, tmp_path):
    """alice's job runs on the idle machine (alone in the queue: it causes no delay). While it
    runs, bob's (value 10, delay cost 0.5/s, 100 s) and carol's (value 50, patience 55.5... s:
    delay cost 0.9/s, 10 s) queue; the page's threshold for bob's head is 0.9 x 100 = 90. When
    alice's ends, bob's is discarded (10 < 90) and told why, carol's runs. Each owner's balance
    moved by exactly the decisions' payments (rounded once each), the broker's balances say the
    same, and the run replays through the simulator to the same decisions and payments."""
    b = ees.broker
    admin = Client(ees.url, b.admin_token)
    tok = add_users(admin, ("alice", "bob", "carol"), 1000)
    alice, bob = Client(ees.url, tok["alice"]), Client(ees.url, tok["bob"])
    release = tmp_path / "release"
    gated = f"while [ ! -e {release} ]; do sleep 0.05; done"
    with pytest.raises(ClientError, match="runs EES") as exc:  # the spot market is closed
        alice.post("/api/jobs", {"bid": 1, "command": "true"})
    assert exc.value.status == 409
    a = alice.post("/api/ees/jobs", {"value": 50, "delay_cost": 0.1, "runtime": 1000, "command": gated})
    assert a["state"] == "running"
    bj = bob.post("/api/ees/jobs", {"value": 10, "delay_cost": 0.5, "runtime": 100, "command": "true"})
    run, run_bob = market_cli(ees, tok["carol"]), market_cli(ees, tok["bob"])
    out = run("submit", "--value", "50", "--patience", repr(50 / 0.9), "--runtime", "10", "--", "true")
    assert out.startswith("job 3 queued"), out
    q = admin.get("/api/ees")
    assert [x["id"] for x in q["queue"]] == [bj["id"], 3] and q["head_threshold"] == pytest.approx(90.0)
    assert admin.get("/api/market")["ees"]["head_threshold"] == pytest.approx(90.0)
    assert "the head runs if its value is at least 90" in run("status")
    with pytest.raises(ClientError) as exc:  # one's own jobs only
        bob.get(f"/api/ees/jobs/{a['id']}")
    assert exc.value.status == 404
    release.touch()
    assert wait_for(lambda: {j["state"] for j in admin.get("/api/ees")["jobs"]} <= {"completed", "discarded"})
    got = bob.get(f"/api/ees/jobs/{bj['id']}")
    assert got["state"] == "discarded"
    assert got["note"].startswith("discarded: its value 10 is below the delay it causes, 90 ")
    assert "discarded: its value 10 is below" in run_bob("status")
    assert admin.get("/api/ees/jobs/3")["state"] == "completed"
    listed = run_bob("list")
    assert " discarded " in listed and "\n      discarded: its value 10 is below the delay it causes, 90 " in listed
    assert [(j["id"], j["state"]) for j in bob.get("/api/jobs")] == [(bj["id"], "discarded")]  # own jobs only
    shown = run_bob("show", bj["id"])
    assert f"job {bj['id']} of bob: discarded, value 10" in shown and "discarded: its value 10 is below" in shown, shown
    with pytest.raises(ClientError) as exc:  # `market show` of another's EES job: not found
        bob.get(f"/api/jobs/{a['id']}")
    assert exc.value.status == 404
    m = b.ees.market
    paid = paid_by_owner(m)
    assert round(bob.get("/api/jobs")[0]["accrued"] * MICRO) == paid["bob"]  # its one decision's payment
    assert paid["bob"] > 0 > paid["carol"]  # bob's discard spared carol a delay; carol was charged for it
    for u in ("alice", "bob", "carol"):
        assert m.balance(u) == 1000 * MICRO - paid.get(u, 0)
        assert admin.get("/api/balance")["users"][u]["balance"] == m.balance(u) / MICRO
    assert b.store.check_books()["deposits"] == 3000 * MICRO
    assert replays_equal(m)


def test_relaxed_ees_served_packs_jobs_by_cpus_and_replays_equal(tmp_path):
    """Relaxed EES on 2 CPUs: two 1-CPU jobs run at once, a 2-CPU job waits for both (planned
    or queued) and runs when they end; every job runs its command; the run replays through the
    simulator to the same decisions and payments."""
    srv = serve(tmp_path, "relaxed-ees")
    try:
        b = srv.broker
        admin = Client(srv.url, b.admin_token)
        u = user_clients(admin, ("u",), 1000)["u"]
        release = tmp_path / "release"
        gated = f"while [ ! -e {release} ]; do sleep 0.05; done"
        ids = [u.post("/api/ees/jobs", {"value": 60, "delay_cost": 0.01, "runtime": 1000, "command": gated,
                                        "cpus": 1})["id"] for _ in range(2)]
        big = u.post("/api/ees/jobs", {"value": 60, "delay_cost": 0.01, "runtime": 5, "command": "true", "cpus": 2})
        assert {admin.get(f"/api/ees/jobs/{j}")["state"] for j in ids} == {"running"}
        assert big["state"] in ("queued", "planned")
        release.touch()
        assert wait_for(lambda: {j["state"] for j in admin.get("/api/ees")["jobs"]} == {"completed"})
        assert replays_equal(b.ees.market)
        b.store.check_books()
    finally:
        stop_served(srv)


def test_attacks_on_the_ees_routes_change_nothing(ees, tmp_path):
    """Bad and unknown fields, a type outside the declared prior, both or neither of delay cost
    and patience, CPUs other than the machine's under EES, a long command, another user's job
    (read or withdraw), a value above the owner's balance: each refused with its status, naming
    the problem; nothing recorded, no money moved, the other's job untouched."""
    b = ees.broker
    admin = Client(ees.url, b.admin_token)
    eve = Client(ees.url, admin.post("/api/users", {"name": "eve", "deposit": 5})["token"])
    ok = {"value": 1, "delay_cost": 0.1, "runtime": 1, "command": "true"}
    cases = [({**ok, "bid": 3}, 400, "bid"),
             ({"value": 1, "delay_cost": 0.1, "command": "true"}, 400, "runtime"),
             ({**ok, "value": "1"}, 400, "value"),
             ({**ok, "value": 101}, 400, "value 101.0 is outside this market's declared prior"),
             ({**ok, "delay_cost": -1}, 400, "delay cost"),
             ({**ok, "patience": 10}, 400, "not both"),
             ({"value": 1, "runtime": 1, "command": "true"}, 400, "neither"),
             ({"value": 1, "patience": 0, "runtime": 1, "command": "true"}, 400, "patience"),
             ({**ok, "runtime": 0}, 400, "runtime"),
             ({**ok, "cpus": 1}, 400, "cpus must be 2"),
             ({**ok, "command": ""}, 400, "command"),
             ({**ok, "command": "x" * 70000}, 413, "command"),
             ({**ok, "value": 6}, 402, "balance too low")]
    for body, status, words in cases:
        with pytest.raises(ClientError, match=words) as exc:
            eve.post("/api/ees/jobs", body)
        assert exc.value.status == status, body
    assert admin.get("/api/ees")["jobs"] == []
    rich = Client(ees.url, admin.post("/api/users", {"name": "rich", "deposit": 1000})["token"])
    gated = f"while [ ! -e {tmp_path / 'never'} ]; do sleep 0.05; done"
    first = rich.post("/api/ees/jobs", {**ok, "runtime": 100, "command": gated})["id"]
    for call in (lambda: eve.get(f"/api/ees/jobs/{first}"), lambda: eve.request("DELETE", f"/api/ees/jobs/{first}")):
        with pytest.raises(ClientError, match=f"no (EES )?job {first} of yours") as exc:
            call()
        assert exc.value.status == 404
    assert admin.get(f"/api/ees/jobs/{first}")["state"] == "running"
    assert [e["kind"] for e in b.store.entries()] == ["deposit", "deposit"]  # no payment moved
    assert rich.request("DELETE", f"/api/ees/jobs/{first}")["state"] == "cancelled"  # its owner may
    b.store.check_books()


def test_kill_9_of_a_served_ees_market(tmp_path):
    """``market serve --mechanism ees`` killed with -9 while one job runs and two wait: the
    restarted market replays its recorded decisions, re-attaches the running process (no job
    starts twice), keeps the queue, decides on it when the job ends, and the ledger is exact:
    each owner's balance is the deposit less the decisions' payments."""
    release = tmp_path / "release"
    starts = tmp_path / "starts.log"
    gated = f'echo "$MARKETSCHED_JOB_ID" >> {starts}; while [ ! -e {release} ]; do sleep 0.05; done'
    with BrokerRestarts(tmp_path, "--slots", 1, "--mechanism", "ees", "--single-user", "--ees-seed", 7) as brokers:
        admin = brokers.start()
        users = user_clients(admin, ("a", "b", "c"), 100)
        j1 = users["a"].post("/api/ees/jobs", {"value": 50, "delay_cost": 0.2, "runtime": 1e5, "command": gated})["id"]
        j2 = users["b"].post("/api/ees/jobs", {"value": 10, "delay_cost": 0.5, "runtime": 100, "command": "true"})["id"]
        j3 = users["c"].post("/api/ees/jobs", {"value": 50, "delay_cost": 0.3, "runtime": 10, "command": "true"})["id"]
        assert wait_for(lambda: starts.exists() and starts.read_text().split() == [str(j1)])
        before = admin.get("/api/ees")
        brokers.kill_9()
        brokers.start()
        after = admin.get("/api/ees")
        assert after["queue"] == before["queue"] and after["running"] == [j1]
        release.touch()
        assert wait_for(lambda: {j["state"] for j in admin.get("/api/ees")["jobs"]} <= {"completed", "discarded"}, 120)
        assert starts.read_text().split() == [str(j1)]  # the gated job's process started once
        states = {j["id"]: j["state"] for j in admin.get("/api/ees")["jobs"]}
        assert states == {j1: "completed", j2: "discarded", j3: "completed"}  # b's head: 10 < 0.3 x 100
    store = Store(brokers.data)
    books = store.check_books()
    assert books["users"] + books["revenue"] == books["deposits"] == 300 * MICRO
    paid = {u: 0 for u in ("a", "b", "c")}
    for e in store.entries():
        if e["kind"] == "ees payment":
            if e["from_account"].startswith("user:"):
                paid[e["from_account"][5:]] += e["amount"]
            else:
                paid[e["to_account"][5:]] -= e["amount"]
    assert {u: 100 * MICRO - p for u, p in paid.items()} == {u: store.balance(f"user:{u}") for u in paid}
    assert paid["b"] > 0  # the discarded job paid for the delay it would have caused
    store.close()


def test_mechanisms_say_how_ees_runs_live():
    for name in ("ees", "relaxed-ees"):
        out = " ".join(CliRunner().invoke(main, ["mechanisms", name]).output.split())
        assert f"market serve --mechanism {name}" in out and "not yet" not in out


def test_web_page_shows_the_ees_queue_with_the_discard_threshold(ees, tmp_path, browser):
    """The market's page, on an EES market: the queue head first with each job's value, and the
    head's discard threshold (the sum of the waiting jobs' delay costs x the head's run time)."""
    from selenium.webdriver.common.by import By

    from browser_helpers import fresh, wait
    from test_live_web import login

    b = ees.broker
    for u in ("alice", "bob", "carol"):
        b.add_user(True, u, 1000)
    gated = f"while [ ! -e {tmp_path / 'never'} ]; do sleep 0.05; done"
    b.ees.submit("alice", 50, 1000, gated, delay_cost=0.1)  # runs
    b.ees.submit("bob", 10, 100, gated, delay_cost=0.5)  # head: threshold 0.9 x 100
    b.ees.submit("carol", 50, 10, gated, delay_cost=0.9)
    browser.get(f"{ees.url}/")
    login(browser, b.admin_token)

    def text(el_id):
        return fresh(lambda: browser.find_element(By.ID, el_id).text)

    assert wait(browser, lambda d: text("threshold") == "90.000")
    assert wait(browser, lambda d: "2 bob 10.00 0.500 100.0 2" in text("eesqueue") and "3 carol" in text("eesqueue"))
    assert wait(browser, lambda d: "EES / expected externality" in text("mech") and text("eesrunning") == "1")


def test_a_job_that_cannot_start_completes_at_once_saying_why_and_the_queue_goes_on(tmp_path):
    """A launch the executor refuses (an OSError: a command it cannot start, a machine out of
    processes) does not leave a job 'running' without a process nor fail the request: the job
    completes at once with the reason in its note, and the machine is free for the next head."""
    from test_live_ees import Scripted, make

    class Refusing(Scripted):
        def launch(self, key, command, env=None, **kw):
            if key == 1:
                raise OSError("no such file")
            super().launch(key, command, env, **kw)

    m, clock = make(tmp_path, Refusing())
    m.submit("alice", 10, 0.1, 5, "true")
    assert m.view(1)["state"] == "completed" and m.view(1)["note"] == "launch failed: no such file"
    clock.set(1.0)
    assert m.submit("bob", 10, 0.1, 5, "true")["state"] == "running"
    assert m.executor.log == [("launch", 2, None)]
    m.store.check_books()
