"""The broker with real processes: preemption and resumption, charges equal to the simulator's,
admission and running out of money, cancel, bad input that changes nothing."""

import math
import time

import numpy as np
import pytest

from live_helpers import proc_state, wait_for, work
from marketsched.live.broker import Broker, MarketConfig, MarketError
from marketsched.live.replay import simulate_recorded
from marketsched.platform.executor import proc_start_ticks


@pytest.fixture
def market(tmp_path):
    brokers = []

    def make(**cfg):
        b = Broker(tmp_path / "market", MarketConfig(**{"single_user": True, **cfg})).start()
        b.ensure_admin()
        brokers.append(b)
        return b

    yield make
    for b in brokers:
        if not b._stopping:
            b.stop(kill_jobs=True)


def suspended(b, job_id, pid):
    """Every process of the job is stopped: its cgroup frozen (or, without cgroups, the wrapper
    in state T)."""
    if b.executor.contained:
        return b.executor.frozen(job_id)
    return proc_state(pid) == "T"


def states(b, user="admin", admin=True):
    return {j["id"]: j["state"] for j in b.jobs(user, admin)}


def test_higher_bid_preempts_lower_which_resumes_and_charges_equal_simulator(market):
    b = market(slots=1)
    b.add_user(True, "alice", 100)
    b.add_user(True, "bob", 100)
    release = b.data / "release-low"  # low runs until released: still running when high comes
    low = b.submit("alice", False, 2.0, f"while [ ! -e {release} ]; do sleep 0.05; done; echo done low")["id"]
    assert wait_for(lambda: b.job("alice", False, low)["state"] == "running")
    time.sleep(0.4)
    go = b.data / "release-high"  # high runs until the test has queued third behind it
    high = b.submit("bob", False, 5.0, work(0.6, "high", until=go))["id"]
    # the preemption is decided within the submission
    assert states(b) == {low: "preempted", high: "running"}
    pid = b.job("alice", False, low)["pid"]
    assert wait_for(lambda: suspended(b, low, pid))
    third = b.submit("bob", False, 3.0, work(0.3, "third"))["id"]  # queued behind high, ahead of low
    assert b.price()["price"] == 3.0  # k-th price: best queued bid
    release.touch()
    go.touch()
    assert wait_for(lambda: all(s == "completed" for s in states(b).values()))
    jl, jh, jt = (b.job("admin", True, j) for j in (low, high, third))
    assert jl["preemptions"] == 1 and jh["preemptions"] == 0
    assert jh["end_t"] <= jt["first_start"] and jt["end_t"] <= [e["t"] for e in jl["events"] if e["kind"] == "resume"][0]
    assert [j["exit_code"] for j in (jl, jh, jt)] == [0, 0, 0]
    assert jl["stdout"] == "done low\n"
    # the ledger equals what the simulator computes for the recorded sequence (measured
    # submit and run times): to a micro-unit per job
    jobs = [jl, jh, jt]
    rec = simulate_recorded([j["submit_t"] for j in jobs], [j["run_seconds"] for j in jobs], [2.0, 5.0, 3.0], 1)
    np.testing.assert_allclose([j["charged"] for j in jobs], rec.payment, atol=2e-6)
    np.testing.assert_allclose([j["first_start"] for j in jobs], rec.first_start, atol=1e-6)
    assert rec.preemptions.tolist() == [1, 0, 0]
    # (how far the measured run times are from the commands' nominal ones is the machine's
    # reaction time, a figure of the load, not something a test can bound)
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 200
    assert books["revenue"] == pytest.approx(sum(j["charged"] for j in jobs), abs=1e-9)


def test_nphb_does_not_preempt_and_first_price_charges_bids(market):
    b = market(slots=1, mechanism="nphb", pricing="first")
    b.add_user(True, "alice", 100)
    go = b.data / "release-a"  # a runs until the test has seen c queued behind it
    a = b.submit("alice", False, 2.0, work(0.5, until=go))["id"]
    c = b.submit("alice", False, 9.0, work(0.2))["id"]
    assert states(b, "alice", False) == {a: "running", c: "queued"}
    go.touch()
    assert wait_for(lambda: set(states(b).values()) == {"completed"})
    ja, jc = b.job("alice", False, a), b.job("alice", False, c)
    # first price: the machine is full (active jobs >= 1 slot) while each runs: each pays its bid
    assert ja["charged"] == pytest.approx(2.0 * ja["run_seconds"], abs=2e-6)
    assert jc["charged"] == pytest.approx(9.0 * jc["run_seconds"], abs=2e-6)
    assert jc["first_start"] == ja["end_t"]


def test_admission_rule_refuses_and_stores_nothing(market):
    b = market(slots=1, admission_seconds=10)
    b.add_user(True, "carol", 15)
    with pytest.raises(MarketError, match="balance too low") as e:
        b.submit("carol", False, 2.0, "true")  # needs 10 s x bid 2 = 20
    assert e.value.status == 402
    assert b.jobs("carol", False) == []
    b.add_user(True, "cy", 5)
    with pytest.raises(MarketError, match="reservation price"):
        b.submit("cy", False, 0.1, "true")  # a bid below 1 may pay 1: needs max(0.1, 1) x 10 s = 10 > 5
    assert b.jobs("admin", True) == [] and b.books()["revenue"] == 0
    j = b.submit("carol", False, 1.5, "true")  # 10 s x 1.5 = 15: just enough
    assert j["state"] in ("running", "completed") and len(b.jobs("carol", False)) == 1


def test_running_out_of_money_holds_jobs_until_a_deposit(market):
    b = market(slots=2, charge_interval=0.2, admission_seconds=0.1)
    b.add_user(True, "dave", 1.0)  # 2 jobs at the reservation price 1 each: out of money after 0.5 s
    go = b.data / "release-dave"  # j runs until after the deposit: it is held, not finished
    j = b.submit("dave", False, 3.0, work(1.5, "dave", until=go))["id"]
    q = b.submit("dave", False, 3.0, work(0.2))["id"]  # runs too: 2 slots, empty queue, price 1 each
    assert wait_for(lambda: b.job("dave", False, j)["state"] == "held")
    view = b.job("dave", False, j)
    assert b.balances("dave", False)["balance"] == 0.0  # never negative
    # the shortfall (price x the broker's reaction time) is recorded, not charged; at most what
    # the job's running time until the hold cost at its price, 1 (how small it is depends on load)
    hold_t = [e["t"] for e in view["events"] if e["kind"] == "hold"][-1]
    assert 0 <= view["unpaid"] <= 1.0 * (hold_t - view["first_start"]) + 1e-6
    assert b.job("dave", False, q)["state"] in ("held", "completed")
    pid = view["pid"]
    assert wait_for(lambda: suspended(b, j, pid))
    assert [e["kind"] for e in view["events"]][-1] == "hold"
    with pytest.raises(MarketError, match="balance too low"):
        b.submit("dave", False, 1.0, "true")
    b.deposit(True, "dave", 50)
    assert b.job("dave", False, j)["state"] == "running"
    go.touch()
    assert wait_for(lambda: b.job("dave", False, j)["state"] == "completed")
    view = b.job("dave", False, j)
    assert view["stdout"] == "done dave\n" and view["exit_code"] == 0
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 51
    kinds = [e["kind"] for e in view["events"]]
    assert kinds.index("hold") < kinds.index("release") < kinds.index("resume")


def test_cancel_running_and_queued_only_by_owner(market):
    b = market(slots=1)
    b.add_user(True, "erin", 100)
    b.add_user(True, "frank", 100)
    r = b.submit("erin", False, 5.0, "sleep 30")
    q = b.submit("erin", False, 1.0, "sleep 30")
    with pytest.raises(MarketError, match="no job") as e:
        b.cancel("frank", False, r["id"])
    assert e.value.status == 404
    assert [j["id"] for j in b.jobs("frank", False)] == []  # frank does not see erin's jobs
    time.sleep(0.3)
    out = b.cancel("erin", False, r["id"])
    assert out["state"] == "cancelled" and out["charged"] > 0
    assert wait_for(lambda: proc_start_ticks(r["pid"]) is None)  # group killed
    assert b.job("erin", False, q["id"])["state"] == "running"  # the queued job got the slot
    b.cancel("admin", True, q["id"])  # the administrator may cancel any job
    with pytest.raises(MarketError, match="already ended") as e:
        b.cancel("erin", False, q["id"])
    assert e.value.status == 409
    assert b.price()["running"] == 0


def test_rebid_overtakes_and_preempts_and_charges_the_rule(market):
    b = market(slots=1, admission_seconds=10)
    b.add_user(True, "alice", 100)
    b.add_user(True, "bob", 100)
    go = b.data / "release-a"  # a runs until bob's rebid has preempted it
    a = b.submit("alice", False, 2.0, work(1.0, "a", until=go))["id"]
    q = b.submit("bob", False, 1.0, work(0.4, "q"))["id"]
    assert wait_for(lambda: b.job("alice", False, a)["state"] == "running")
    time.sleep(0.3)
    with pytest.raises(MarketError, match="no job") as e:
        b.rebid("alice", False, q, 9.0)  # not hers
    assert e.value.status == 404
    with pytest.raises(MarketError, match="balance too low") as e:
        b.rebid("bob", False, q, 20.0)  # raising passes admission again: 10 s x 20 > 100
    assert e.value.status == 402 and b.job("bob", False, q)["bid"] == 1.0
    for bad in (math.nan, 0.0, -1.0, "x", None):
        with pytest.raises(MarketError, match="bid"):
            b.rebid("bob", False, q, bad)
    out = b.rebid("bob", False, q, 5.0)  # bob outbids alice: HB preempts her within the call
    assert out["state"] == "running" and out["bid"] == 5.0
    assert states(b) == {a: "preempted", q: "running"}
    assert b.price()["price"] == 2.0  # k-th price: alice's queued bid
    go.touch()
    assert wait_for(lambda: set(states(b).values()) == {"completed"})
    ja, jq = b.job("admin", True, a), b.job("admin", True, q)
    assert ja["preemptions"] == 1 and ja["stdout"] == "done a\n"
    assert [e["detail"] for e in jq["events"] if e["kind"] == "rebid"] == ["bid 1 -> 5"]
    # alice paid 1 (bob's queued bid) before the preemption and 1 (empty queue) after it; bob
    # ran only after his rebid, with alice queued: the k-th price 2
    assert ja["charged"] == pytest.approx(1.0 * ja["run_seconds"], abs=2e-6)
    assert jq["charged"] == pytest.approx(2.0 * jq["run_seconds"], abs=2e-6)
    with pytest.raises(MarketError, match="already ended") as e:
        b.rebid("bob", False, q, 3.0)
    assert e.value.status == 409
    books = b.books()
    assert books["users"] + books["revenue"] == pytest.approx(books["deposits"]) == 200


@pytest.mark.parametrize("bid", [math.nan, math.inf, -math.inf, -1.0, 0.0, "5", True, None])
def test_bad_bid_changes_nothing(market, bid):
    b = market(slots=1)
    b.add_user(True, "gina", 10)
    before = (b.jobs("admin", True), b.books(), b.store.entries())
    with pytest.raises(MarketError, match="bid must be a") as e:
        b.submit("gina", False, bid, "true")
    assert e.value.status == 400
    assert (b.jobs("admin", True), b.books(), b.store.entries()) == before


@pytest.mark.parametrize("command", ["", "   ", [], None, 5, ["ok", 3]])
def test_empty_or_bad_command_changes_nothing(market, command):
    b = market(slots=1)
    b.add_user(True, "hal", 10)
    with pytest.raises(MarketError, match="command"):
        b.submit("hal", False, 1.0, command)
    assert b.jobs("admin", True) == []


def test_unknown_user_wrong_token_and_other_refusals(market):
    b = market(slots=1)
    tok = b.add_user(True, "ivy", 10)["token"]
    assert b.authenticate(tok) == ("ivy", False)
    assert b.authenticate(b.admin_token) == ("admin", True)
    for bad in ("", None, tok + "x", "nonsense"):
        with pytest.raises(MarketError, match="token") as e:
            b.authenticate(bad)
        assert e.value.status == 401
    with pytest.raises(MarketError, match="unknown user 'zed'") as e:
        b.deposit(True, "zed", 5)
    assert e.value.status == 404
    with pytest.raises(MarketError, match="unknown user"):
        b.submit("zed", False, 1.0, "true")
    with pytest.raises(MarketError, match="only the administrator"):
        b.add_user(False, "mallory", 1e6)
    with pytest.raises(MarketError, match="already exists"):
        b.add_user(True, "ivy", 1)
    with pytest.raises(MarketError, match="user name"):
        b.add_user(True, "a b", 1)
    with pytest.raises(MarketError, match="deposit must be a positive"):
        b.deposit(True, "ivy", -5)
    for bad in (2, 0, -1, True, 1.0, "1"):  # more CPUs than the market's 1, none, not a whole number
        with pytest.raises(MarketError, match=r"procs \(the CPUs the job asks for\) must be a whole number from 1 to 1"):
            b.submit("ivy", False, 1.0, "true", procs=bad)
    with pytest.raises(MarketError, match="job id"):
        b.cancel("ivy", False, "x1")
    books = b.books()
    assert books == {"deposits": 10.0, "users": 10.0, "revenue": 0.0}
    assert b.jobs("admin", True) == []


def test_wsept_needs_an_estimate(market):
    b = market(slots=1, mechanism="wspt")
    b.add_user(True, "jo", 10)
    with pytest.raises(MarketError, match="runtime estimate"):
        b.submit("jo", False, 1.0, "true")
    assert b.submit("jo", False, 1.0, "true", estimate=5)["estimate"] == 5


def test_config_checks_and_sqlite_durability_modes(tmp_path, market):
    for bad, msg in [(dict(mechanism="easy"), "unknown mechanism"), (dict(pricing="second"), "unknown pricing"),
                     (dict(slots=0), "slots"), (dict(charge_interval=0), "charge interval"),
                     (dict(sync="sometimes"), "sync")]:
        with pytest.raises(ValueError, match=msg):
            Broker(tmp_path / "bad", MarketConfig(**bad))
    full = market(slots=1)
    with full.lock:  # the market thread shares the connection: asking it outside the lock once
        # met the thread's COMMIT ("SQL statements in progress")
        assert full.store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert full.store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    normal = Broker(tmp_path / "normal", MarketConfig(sync="normal", single_user=True))
    assert normal.store.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    normal.stop()
    normal.stop()  # a second stop does nothing (it once failed writing to the closed wake-up pipe)


def test_a_parallel_job_on_the_local_executor_gets_k_times_the_cpu_limit(market):
    """``procs`` K on the local executor: one job whose cgroup CPU limit is K x ``job_cpus``, and
    which pays K times the price per second."""
    b = market(slots=3, job_cpus=0.5)
    b.add_user(True, "ann", 100)
    j = b.submit("ann", False, 1.0, "sleep 30", procs=3)["id"]
    assert b.job("admin", True, j)["state"] == "running" and b.job("admin", True, j)["rate"] == pytest.approx(3.0)
    assert wait_for(lambda: j in b.executor.procs, 30)
    layout = b.executor.layout
    if layout.cpu is not None:
        kind, d = b.executor.procs[j].cgroup.cpu
        text = (d / ("cpu.max" if kind == "cgroup2" else "cpu.cfs_quota_us")).read_text().split()[0]
        assert int(text) == 150_000  # 3 x 0.5 CPU per 100 ms period
    b.cancel("admin", True, j)
