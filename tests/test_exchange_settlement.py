"""Who is at fault: the settlement rules of docs/exchange.md ("Who is at fault"), one test per
row, on a fake clock. Rows about what a user's command does run its command for real (the
live market's executor, process groups, no cgroups); rows about the provider's side use the
fake backend (a lost node cannot be staged on one machine) or Slurm's accounting states.

The reference is the table itself, restated as a plain function (``expected``) and compared
with the exchange on random sequences of outcomes.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exchange_helpers import fake_slurm_partitions, make_exchange, one_contract
from live_helpers import wait_for
from marketsched.exchange import capacity, providers
from marketsched.exchange.core import Exchange, create_exchange
from marketsched.exchange.providers import Contracted, provider_backends, slurm_fault
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock


def _entries(ex, cid):
    return [(e["kind"], e["from_account"], e["to_account"], e["amount"])
            for e in ex.store.ledger.entries() if e["job_id"] == cid]


def _paid(c):
    """The ledger of a contract whose provider is paid (delivered)."""
    return [("user-price", f"user:{c['user']}", "exchange:clearing", c["user_price"]),
            ("provider-price", "exchange:clearing", f"provider:{c['provider']}", c["provider_price"])]


def _penalised(c):
    return [("penalty", f"provider:{c['provider']}", f"user:{c['user']}", c["penalty"])]


# ---------------------------------------------------------------------------- real commands
@pytest.fixture
def real(tmp_path):
    """An exchange whose local provider p1 (node n0: 2 CPU units, 100 MiB) runs contract jobs as
    real processes (the exchange's own account: single-user), on a fake clock; slots of 10 s."""
    data = tmp_path / "ex"
    store = ExchangeStore(data)
    create_exchange(store, slot_seconds=10, period_seconds=10, mechanism="pay-as-bid", penalty=1.0)
    clock = FakeClock()
    ex = Exchange(store, clock, provider_backends(data, containment="none"))
    ex.single_user = True
    ex.join("p1")
    ex.add_node("p1", "n0", 2, 100)
    ex.submit_offer("p1", "n0", 1.0, 1, 50)
    yield ex, clock, data
    for c in ex.open_contracts():
        if c["state"] == "running":
            ex.backend("p1").stop(c["id"])
    ex.close()


def _run_to_end(ex, clock, command, first=1, last=5):
    """``command`` as u1's contract for slots first..last; ticks until it is settled."""
    rid = ex.submit_request("u1", 5.0, 1, 10, first, last, command)
    clock.set(first * 10 - 5)
    ex.tick()  # clears
    clock.set(first * 10)
    ex.tick()  # starts
    c = next(c for c in ex.store.contracts() if c["request_id"] == rid)
    assert wait_for(lambda: (ex.tick(), ex.store.contract(c["id"])["state"])[1] not in ("pending", "running"), 60)
    return ex.store.contract(c["id"])


@pytest.mark.parametrize("command, code", [("exit 200", 200), ("exit 255", 255), ("kill -9 $$", 137),
                                           ("kill -TERM $$", 143), ("exit 3", 3)])
def test_any_exit_status_of_the_users_command_is_the_users_outcome(real, command, code):
    """Any exit status, also >= 128 and a signal the command sends itself: the provider is paid."""
    ex, clock, _ = real
    c = _run_to_end(ex, clock, command)
    assert (c["state"], c["exit_code"], c["note"]) == ("delivered", code, "the job exited by itself")
    assert _entries(ex, c["id"]) == _paid(c)
    assert ex.store.check_books()["penalties"] == 0


def test_a_job_that_kills_its_own_wrapper_is_the_users_outcome(real):
    """The job's processes may signal one another (one account): killing the exchange's exit-code
    wrapper leaves no exit status, and still the user's command ended itself."""
    ex, clock, _ = real
    c = _run_to_end(ex, clock, "kill -9 $PPID; sleep 1")
    assert c["state"] == "delivered" and c["exit_code"] == -9  # the wrapper, the exchange's child: SIGKILL
    assert _entries(ex, c["id"]) == _paid(c)


def test_a_crash_before_the_go_makes_nobody_pay_and_the_job_runs_once(real, tmp_path):
    """The exchange dies after its launcher is recorded but before the go: nothing ran. The
    restarted exchange puts the contract back to pending and runs the command once, inside its
    window (before: it settled the contract failed and the provider paid a penalty)."""
    ex, clock, data = real
    stamp = tmp_path / "ran"
    rid = ex.submit_request("u1", 5.0, 1, 10, 1, 5, f"echo $MARKETSCHED_CONTRACT >> {stamp}")
    ex.tick()
    (c,) = [c for c in ex.store.contracts() if c["request_id"] == rid]
    clock.set(10)
    with ex.store.transaction():  # what Exchange.start does first
        ex.store.update_contract(c["id"], state="starting", started_t=10.0)
    executor = ex.backend("p1").executor
    proc = executor.start(c["id"], "echo never")
    executor.record(proc, None)
    proc.popen.stdin.close()  # the exchange dies here: its launcher reads end of file, no go
    proc.popen.wait()
    executor.shutdown()
    ex2 = Exchange(ExchangeStore(data), clock, provider_backends(data, containment="none"))
    ex2.single_user = True
    try:
        ex2.recover()
        assert ex2.store.contract(c["id"])["state"] == "pending"
        assert not stamp.exists()
        clock.set(11)
        assert wait_for(lambda: (ex2.tick(), ex2.store.contract(c["id"])["state"])[1] == "delivered", 60)
    finally:
        ex2.close()
    assert stamp.read_text().split() == [str(c["id"])]  # ran once, after the restart
    assert _entries(ex2, c["id"]) == _paid(ex2.store.contract(c["id"]))
    assert ex2.store.check_books()["penalties"] == 0


def test_a_crash_after_the_go_reattaches_the_job(real, tmp_path):
    """The exchange dies after the go, before recording the start: the job runs on, and the
    restarted exchange re-attaches it (it is not started a second time)."""
    ex, clock, data = real
    stamp = tmp_path / "ran"
    rid = ex.submit_request("u1", 5.0, 1, 10, 1, 5, f"echo $MARKETSCHED_CONTRACT >> {stamp}; sleep 30")
    ex.tick()
    (c,) = [c for c in ex.store.contracts() if c["request_id"] == rid]
    clock.set(10)
    ex.tick()
    with ex.store.transaction():  # as if the exchange had died before recording "running"
        ex.store.update_contract(c["id"], state="starting")
    assert wait_for(stamp.exists, 60)
    ex.backend("p1").executor.shutdown()
    ex2 = Exchange(ExchangeStore(data), clock, provider_backends(data, containment="none"))
    ex2.single_user = True
    try:
        ex2.recover()
        assert ex2.store.contract(c["id"])["state"] == "running"
        clock.set(60)
        ex2.tick()
        assert ex2.store.contract(c["id"])["state"] == "delivered"
    finally:
        ex2.close()
    assert stamp.read_text().split() == [str(c["id"])]


def test_a_node_whose_cpus_are_offline_is_the_providers_failure(real, monkeypatch):
    ex, clock, _ = real
    ex.join("p2")
    ex.add_node("p2", "n0", 2, 100, cpus=[7])
    ex.submit_offer("p2", "n0", 0.5, 1, 50)  # cheaper: it wins
    monkeypatch.setattr(capacity, "cpus_here", lambda: {0, 1, 7})  # CPU 7 is here when the clearing sells it
    rid = ex.submit_request("u1", 5.0, 1, 10, 1, 3, "true")
    ex.tick()
    monkeypatch.setattr(providers, "online_cpus", lambda: {0, 1})  # and offline before the job starts
    monkeypatch.setattr(capacity, "cpus_here", lambda: {0, 1})
    clock.set(10)
    ex.tick()
    (c,) = [c for c in ex.store.contracts() if c["request_id"] == rid]
    c = ex.store.contract(c["id"])
    assert c["provider"] == "p2" and c["state"] == "failed"
    assert c["note"] == ("the provider could not start the job: the node's CPU(s) [7] are not here (offline or out "
                         "of the exchange's CPU set), and no other node of the provider has its CPU and memory free "
                         "in its window")
    assert _entries(ex, c["id"]) == _penalised(c)


def test_a_contract_on_lost_cpus_moves_to_free_capacity_of_its_provider_and_the_replay_agrees(tmp_path, monkeypatch):
    """CPU 0 of node n0 is unplugged (an injected CPU counter) after two 1-unit contracts were
    made on n0: the first moves to the provider's node n1, which has the room, keeps its prices,
    starts there and is delivered; the second has nowhere to go and fails when its window
    begins, at the provider's cost. A clearing meanwhile sees n1 full; the replay agrees."""
    from marketsched.exchange.replay import contract_terms, replay_session

    here = {0, 1, 2}
    monkeypatch.setattr(capacity, "cpus_here", lambda: set(here))
    ex, clock, machines = make_exchange(tmp_path / "x.db", mechanism="k-pricing")
    ex.join("p1")
    n0 = ex.add_node("p1", "n0", 2, 100, cpus=[0, 1], checked=True)
    n1 = ex.add_node("p1", "n1", 1, 100, cpus=[2], checked=True)
    ex.submit_offer("p1", "n0", 1.0, 1, 50)  # n1 is not offered: the provider's spare node
    first, second = (ex.submit_request(u, 5.0, 1, 10, 2, 3, "true") for u in ("u1", "u2"))
    ex.clear()
    made = {c["request_id"]: c for c in ex.store.contracts()}
    assert {c["node_id"] for c in made.values()} == {n0}
    here.discard(0)
    ex.tick()  # before the windows (slot 2 begins at 20 s): the move
    a, b = ex.store.contract(made[first]["id"]), ex.store.contract(made[second]["id"])
    assert (a["node_id"], a["state"], b["node_id"], b["state"]) == (n1, "pending", n0, "pending")
    assert {k: a[k] for k in ("user_price", "provider_price", "penalty")} == \
        {k: made[first][k] for k in ("user_price", "provider_price", "penalty")}
    (move,) = ex.store.moves()
    assert (move["contract_id"], move["from_node"], move["to_node"], move["after_period"]) == (a["id"], n0, n1, 1)
    assert move["why"] == ("the node's CPU(s) [0] are not here (offline or out of the exchange's CPU set): moved "
                           "from node n0 to node n1")
    ex.submit_offer("p1", "n1", 0.1, 1, 50)  # n1's slots 2-3 are taken by the moved contract
    third = ex.submit_request("u3", 9.0, 1, 10, 2, 3, "true")
    clock.set(15)
    ex.clear()
    assert not [c for c in ex.store.contracts() if c["request_id"] == third]
    clock.set(20)
    ex.tick()
    a, b = ex.store.contract(a["id"]), ex.store.contract(b["id"])
    assert [s[0] for s in machines.by_name["p1"].started] == [a["id"]]
    assert machines.by_name["p1"].started[0][2] == (2,)  # on n1's CPU
    assert b["state"] == "failed" and "no other node of the provider has its CPU and memory free" in b["note"]
    assert _entries(ex, b["id"]) == _penalised(b)
    clock.set(40)
    ex.tick()
    assert ex.store.contract(a["id"])["state"] == "delivered"
    ex.store.check_books()
    here.add(0)  # the replay moves the contract after the clearing that preceded the move
    assert replay_session(ex.store) == contract_terms(ex.store)


# ---------------------------------------------------------------------------- the provider's side
def _one(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path, penalty=1.0)
    clock.set(21)
    ex.tick()
    return ex, clock, machines.by_name["p1"], c


def test_a_job_the_providers_side_ends_is_the_providers_failure(tmp_path):
    ex, clock, m, c = _one(tmp_path)
    m.fail(c["id"], "slurm: NODE_FAIL")
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "failed" and done["note"] == "the provider ended the job: slurm: NODE_FAIL"
    assert _entries(ex, c["id"]) == _penalised(c)


def test_contracted_resources_not_delivered_as_measured_are_the_providers_failure(tmp_path):
    """A 2-of-4-unit contract on a 2-CPU node is owed 1 CPU's worth and 10 MiB (at least the
    floor): a job given half a CPU, or too little memory, was not delivered."""
    ex, clock, m, c = _one(tmp_path)
    m.given[c["id"]] = {"cpus": 0.5, "memory": 2**30}
    clock.set(40)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "failed"
    assert done["note"] == ("contracted resources not delivered: the job was given 0.5 CPUs' worth of time, "
                            "the contract 1")
    assert _entries(ex, c["id"]) == _penalised(c)


def test_a_job_given_its_contract_as_measured_is_delivered(tmp_path):
    ex, clock, m, c = _one(tmp_path)
    m.given[c["id"]] = {"cpus": 1.0, "memory": providers.MIN_JOB_MEMORY}
    m.exit(c["id"], 1)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "delivered" and _entries(ex, c["id"]) == _paid(c)


@pytest.mark.parametrize("state, uid, fault", [
    ("COMPLETED", 1001, None),
    ("FAILED", 1001, None),
    ("OUT_OF_MEMORY", 1001, None),
    ("CANCELLED by 1001", 1001, None),  # the user cancelled their own job
    ("CANCELLED by 0", 1001, "slurm: CANCELLED by 0 (not by the job's account)"),
    ("CANCELLED by 1002", 1001, "slurm: CANCELLED by 1002 (not by the job's account)"),
    ("CANCELLED by 0", None, "slurm: CANCELLED by 0 (not by the job's account)"),  # the job's account unknown
    ("NODE_FAIL", 1001, "slurm: NODE_FAIL"),
    ("PREEMPTED", 1001, "slurm: PREEMPTED"),
    ("BOOT_FAIL", 1001, "slurm: BOOT_FAIL"),
    ("TIMEOUT", 1001, "slurm: TIMEOUT"),
    (None, 1001, "slurm has no record of the job's end"),
])
def test_slurm_accounting_states_are_judged_by_the_table(state, uid, fault):
    assert slurm_fault(state, uid) == fault


def test_sacct_sizes_and_durations():
    assert providers.slurm_size("50M") == 50 * 2**20 and providers.slurm_size("2Gn") == 2 * 2**30
    assert providers.slurm_size("1234K") == 1234 * 1024 and providers.slurm_size("") is None
    assert providers.slurm_duration("00:00.181") == pytest.approx(0.181)
    assert providers.slurm_duration("1-02:03:04") == 86400 + 2 * 3600 + 3 * 60 + 4


def test_a_contract_is_owed_its_share_of_the_nodes_cpus_and_its_memory():
    c = Contracted.of({"cpu": 3, "mem": 100}, {"cpu": 4, "cpus": [2, 0]})
    assert c.node_cpus == (0, 2) and c.cpus(2) == 1.5 and c.memory() == 100 * 2**20
    lim = c.limits([0, 2])
    assert (lim.cpus, lim.memory, lim.cpuset, lim.processes) == (1.5, 100 * 2**20, (0, 2), providers.JOB_PROCESSES)
    assert Contracted.of({"cpu": 1, "mem": 0}, {"cpu": 1, "cpus": None}).memory() == providers.MIN_JOB_MEMORY
    assert c.shortfall(2, None) is None and c.shortfall(2, {"cpus": None, "memory": None}) is None
    assert c.shortfall(2, {"cpus": 1.5, "memory": 100 * 2**20}) is None
    assert "memory" in c.shortfall(2, {"cpus": 2, "memory": 99 * 2**20})


# ---------------------------------------------------------------------------- the table, on random runs
def expected(event: str) -> str:
    """The table of docs/exchange.md, "Who is at fault": a contract's state from what happened."""
    return {"exit": "delivered", "window": "delivered", "provider": "failed", "short": "failed",
            "no-start": "failed", "missed": "lapsed"}[event]


event_st = st.tuples(st.sampled_from(["exit", "window", "provider", "short", "no-start", "missed"]),
                     st.sampled_from([0, 1, 127, 128, 137, 200, 255, None]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event_st, min_size=1, max_size=6))
def test_random_outcomes_settle_by_the_table_and_the_books_balance(tmp_path_factory, events):
    ex, clock, machines = make_exchange(tmp_path_factory.mktemp("t") / "x.db", mechanism="pay-as-bid", penalty=1.0)
    ex.join("p1")
    for i in range(len(events)):
        ex.add_node("p1", f"n{i}", 2, 100)
        ex.submit_offer("p1", f"n{i}", 1, 2, 4)
    for _ in events:
        ex.submit_request("u1", 9, 2, 10, 2, 3, "true")
    ex.tick()
    contracts = ex.store.contracts()
    assert len(contracts) == len(events)
    m = machines({"name": "p1"})
    missed = {c["id"] for c, (ev, _) in zip(contracts, events) if ev == "missed"}  # the exchange was down
    clock.set(20)
    for c, (ev, code) in zip(contracts, events):
        if c["id"] in missed:
            continue
        m.fail_start = ev == "no-start"
        ex.start(c, ex.store.nodes()[c["node_id"]], clock())
        if ev == "short":
            m.given[c["id"]] = {"cpus": 0.1, "memory": None}
    m.fail_start = False
    for c, (ev, code) in zip(contracts, events):
        if ev == "exit":
            m.exit(c["id"], code)
        elif ev == "provider":
            m.fail(c["id"], "node lost", code)
    clock.set(45)  # every window has passed
    ex.execute()
    for c, (ev, _) in zip(contracts, events):
        done = ex.store.contract(c["id"])
        assert done["state"] == expected(ev), (ev, done)
        want = {"delivered": _paid(c), "failed": _penalised(c), "lapsed": []}[done["state"]]
        assert _entries(ex, c["id"]) == want
    assert sum(ex.store.balances().values()) == 0
    ex.store.check_books()


# ---------------------------------------------------------------------------- one request, one job
def _split(tmp_path):
    """u1's request for slots 2-3 is split: slot 2 on p1's node, slot 3 on p2's (each offers one
    slot); returns the exchange, clock, machines and the two contracts in window order."""
    ex, clock, machines = make_exchange(tmp_path / "x.db", mechanism="pay-as-bid", penalty=1.0)
    for p, slot in (("p1", 2), ("p2", 3)):
        ex.join(p)
        ex.add_node(p, "n", 2, 100)
        ex.submit_offer(p, "n", 1, slot, slot)
    rid = ex.submit_request("u1", 9, 2, 10, 2, 3, "long-job")
    ex.tick()
    first, second = sorted((c for c in ex.store.contracts() if c["request_id"] == rid), key=lambda c: c["first_slot"])
    assert (first["provider"], first["end_t"], second["provider"], second["start_t"]) == ("p1", 30.0, "p2", 30.0)
    return ex, clock, machines, first, second


def test_a_split_request_whose_job_ended_runs_nothing_more(tmp_path):
    """The job ended by itself in its first contract: the second runs nothing (before: the
    command ran again, once per contract) and its provider is paid for the capacity it held."""
    ex, clock, machines, first, second = _split(tmp_path)
    clock.set(20)
    ex.tick()
    machines.by_name["p1"].exit(first["id"], 0)
    clock.set(25)
    ex.tick()
    clock.set(30)
    ex.tick()
    clock.set(40)
    ex.tick()
    assert [s[0] for m in machines.by_name.values() for s in m.started] == [first["id"]]
    done = ex.store.contract(second["id"])
    assert done["state"] == "delivered" and done["note"].startswith(
        f"the request's job had ended by itself (in contract {first['id']})")
    assert _entries(ex, second["id"]) == _paid(second)
    ex.store.check_books()


def test_a_split_request_still_running_moves_without_running_twice_at_once(tmp_path):
    """Still running when its first contract's window ends: stopped there (delivered), then
    started on the second contract's node, never beside itself."""
    ex, clock, machines, first, second = _split(tmp_path)
    seen = []
    p2 = machines({"name": "p2"})
    start = p2.start

    def watched(cid, *args, **kw):
        seen.append(sorted(machines.by_name["p1"].live))  # what of the job still runs on p1
        return start(cid, *args, **kw)

    p2.start = watched
    clock.set(20)
    ex.tick()
    clock.set(30)
    ex.tick()
    assert seen == [[]]
    assert ex.store.contract(first["id"])["state"] == "delivered"
    assert ex.store.contract(second["id"])["state"] == "running"
    clock.set(40)
    ex.tick()
    assert ex.store.contract(second["id"])["state"] == "delivered"
    assert sorted((s[0], s[1]) for m in machines.by_name.values() for s in m.started) == \
        [(first["id"], 20), (second["id"], 30)]


# ---------------------------------------------------------------------------- whose account
def test_exchange_run_says_whose_account_jobs_run_as(tmp_path):
    """As root, jobs run as their users' accounts unless --single-user asks otherwise (then a
    warning: every job runs as root). Not as root, single-user is the only mode."""
    from click.testing import CliRunner

    from marketsched.cli import main

    data = tmp_path / "ex"
    runner = CliRunner()
    assert runner.invoke(main, ["exchange", "init", str(data)]).exit_code == 0
    plain = runner.invoke(main, ["exchange", "run", str(data), "--for", "0", "--containment", "none"])
    single = runner.invoke(main, ["exchange", "run", str(data), "--for", "0", "--containment", "none",
                                  "--single-user"])
    assert plain.exit_code == 0 and single.exit_code == 0, (plain.output, single.output)
    if os.geteuid() == 0:
        assert "multi-user mode: each contract job runs as its user's Unix account" in plain.output
        assert "WARNING: single-user mode as root: every contract job runs as root" in single.output
    else:
        assert "single-user mode" in plain.output and "WARNING" not in single.output
        multi = runner.invoke(main, ["exchange", "run", str(data), "--for", "0", "--multi-user"])
        assert multi.exit_code != 0 and "needs root" in multi.output


def test_a_slurm_contract_is_sized_on_the_partitions_cpus_even_with_a_node_down(tmp_path, monkeypatch):
    """A Slurm provider's node sells units of its partition's CPUs (``TotalCPUs``); a contract's
    job asks ``--cpus-per-task`` = its share of all of them, even when its provider's backend
    starts while a node of the partition is down (before: the share of the CPUs up then, so a
    contract for 2 of 4 units got 1 CPU and was judged on that)."""
    from marketsched.platform import slurm

    class Partition:  # a partition of 4 CPUs, 2 of them on a node that is down
        cpus = 4

        def __init__(self, root, partition=None):
            self.launched = {}

        def partition_cpus(self):
            return 2

        def launch(self, key, command, env=None, user=None, cpus=1, mem_mib=None):
            self.launched[key] = cpus

    monkeypatch.setattr(slurm, "SlurmExecutor", Partition)
    backend = providers.SlurmBackend(tmp_path, "pa")
    half = Contracted.of({"cpu": 2, "mem": 10}, {"cpu": 4, "cpus": None})
    backend.start(1, "true", {}, None, contracted=half)
    assert backend.executor.launched == {1: 2}
    assert half.shortfall(backend._partition_cpus(), {"cpus": 1, "memory": None}) is not None  # 1 CPU is short


def test_a_slurm_job_found_ended_at_a_restart_waits_for_its_final_accounting(monkeypatch, tmp_path):
    """A restarted exchange finds a contract's Slurm job gone while ``sacct`` still shows it
    queued (accounting lags the controller): the end is judged once the accounting is final
    (here: cancelled by root, the provider's side), never on the stale state (it was judged
    "slurm: PENDING" before)."""
    import marketsched.platform.slurm as slurm
    from test_slurm_gate import FakeSlurm

    class Lagging(FakeSlurm):
        acct = "PENDING"

        def __call__(self, args, timeout=30.0, input=None, env=None):
            if args[0] == "sacct":
                jid = args[args.index("-j") + 1]
                return f"{jid}|{self.acct}|2|100M|00:00.000|\n"
            return super().__call__(args, timeout, input, env)

    fake = Lagging()
    monkeypatch.setattr(slurm, "run", fake)
    first = providers.SlurmBackend(tmp_path)
    first.start(7, "true", {}, None)
    jid = first.executor.recorded(7)[0]
    fake.states[jid] = "CANCELLED"  # the exchange's own stop at the window's end; then it dies
    backend = providers.SlurmBackend(tmp_path)  # the restarted exchange's
    assert backend.reattach(7) is True  # not judged yet: its accounting is not final
    assert backend.ended() == []
    fake.acct = "CANCELLED by 0"
    assert backend.ended() == [(7, None)]
    assert backend.fault(7) == "slurm: CANCELLED by 0 (not by the job's account)"


def _on_fake_slurm(monkeypatch, tmp_path):
    """An exchange whose provider ``cluster`` (kind slurm, node ``main`` of 8 units, offered at 5
    for slots 2-5) runs on a fake Slurm with accounting (tests/test_exchange_egg_slurm.py)."""
    import marketsched.platform.slurm as slurm
    from test_exchange_egg_slurm import Accounted

    fake = Accounted()
    monkeypatch.setattr(slurm, "run", fake)
    fake_slurm_partitions(monkeypatch)
    ex, clock, _ = make_exchange(tmp_path / "x.db", machines=providers.provider_backends(tmp_path / "jobs", "none"))
    ex.join("cluster", kind="slurm")
    ex.add_node("cluster", "main", 8, 100)
    ex.backend("cluster").executor.poll = 0.0  # every tick reads the fake's queue
    ex.submit_offer("cluster", "main", 5, 2, 5)
    return ex, clock, fake


def test_a_slurm_job_cancelled_just_before_its_windows_end_is_judged_by_its_accounting(monkeypatch, tmp_path):
    """Root cancels a contract's running Slurm job just before its window ends; Slurm's
    accounting still shows it running at the window's end (sacct lags the end): the verdict waits
    for the final accounting (failed, the provider's penalty), never "served its whole window"
    (as it was before)."""
    ex, clock, fake = _on_fake_slurm(monkeypatch, tmp_path)
    ex.submit_request("u1", 12, 2, 10, 2, 3, "true")
    ex.tick()
    (c,) = ex.store.contracts()
    clock.set(c["start_t"])
    ex.tick()
    job = fake.next_id
    fake.cancel_unaccounted(ex, job)  # by root
    clock.set(c["end_t"])
    ex.tick()
    assert ex.store.contracts()[0]["state"] == "running"
    fake.acct[job] = "CANCELLED by 0"
    ex.tick()
    (c,) = ex.store.contracts()
    assert c["state"] == "failed" and c["penalty"] > 0 and "CANCELLED by 0" in c["note"], c
    assert fake.cancelled() == []
    ex.store.check_books()


def test_a_slurm_job_started_on_the_cpus_another_contracts_stop_frees_had_not_started_in_its_window(monkeypatch,
                                                                                                     tmp_path):
    """Two contracts whose windows end together: one's Slurm job runs, the other's waits in
    Slurm (the partition busy). The exchange's stop of the first frees CPUs and Slurm starts the
    second at once: it had still not started in its window (failed, the provider's penalty),
    whatever the order of the stops (before: "served its whole window")."""
    ex, clock, fake = _on_fake_slurm(monkeypatch, tmp_path)
    first = ex.submit_request("u1", 12, 4, 10, 2, 3, "true")
    second = ex.submit_request("u2", 11, 4, 10, 2, 3, "true")
    ex.tick()
    by = {c["request_id"]: c for c in ex.store.contracts()}
    clock.set(by[first]["start_t"])
    ex.tick()
    jobs = {first: fake.next_id - 1, second: fake.next_id}
    assert by[first]["id"] < by[second]["id"]  # the running one is stopped first
    fake.states.update({jobs[first]: "RUNNING", jobs[second]: "PENDING"})
    fake.frees[jobs[first]] = jobs[second]
    ex.tick()
    clock.set(by[first]["end_t"])
    ex.tick()
    got = {c["request_id"]: c for c in ex.store.contracts()}
    assert (got[first]["state"], got[first]["note"]) == ("delivered", "served its whole window")
    assert (got[second]["state"], got[second]["note"]) == \
        ("failed", "the provider had not started the job by its window's end")
    assert got[second]["penalty"] > 0
    ex.store.check_books()
