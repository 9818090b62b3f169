"""Execution, SLA monitoring and billing with a fake clock and fake backends (no processes)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exchange_helpers import make_exchange, one_contract
from marketsched.exchange.store import CLEARING


def _balance(ex, account):
    return ex.store.balances()[account]


def test_a_job_starts_inside_its_window_and_is_paid_on_delivery(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path)
    assert (c["start_t"], c["end_t"], c["state"]) == (20.0, 40.0, "pending")
    clock.set(19.9)
    ex.tick()
    assert "p1" not in machines.by_name or not machines.by_name["p1"].started
    clock.set(21)
    ex.tick()
    assert machines.by_name["p1"].started == [(c["id"], 21, (0, 1))]
    clock.set(40)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "delivered" and done["note"] == "served its whole window"
    assert _balance(ex, "user:u1") == -c["user_price"] and _balance(ex, "provider:p1") == c["provider_price"]
    assert ex.store.check_books()["penalties"] == 0


def test_a_job_that_exits_by_itself_is_delivered_whatever_its_code(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path)
    clock.set(25)
    ex.tick()
    machines.by_name["p1"].exit(c["id"], 3)
    clock.set(26)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert (done["state"], done["exit_code"], done["ended_t"]) == ("delivered", 3, 26)
    assert _balance(ex, "user:u1") == -c["user_price"]


def test_a_provider_that_fails_mid_contract_pays_its_penalty(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path, penalty=1.5)
    clock.set(25)
    ex.tick()
    machines.by_name["p1"].fail(c["id"], "node lost", 137)  # the provider's side ended it: its node died
    clock.set(27)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "failed" and done["note"] == "the provider ended the job: node lost"
    assert c["penalty"] == round(1.5 * c["user_price"]) > 0
    assert _balance(ex, "provider:p1") == -c["penalty"]
    assert _balance(ex, "user:u1") == c["penalty"]
    books = ex.store.check_books()
    assert books == {"clearing": 0, "users_paid": 0, "providers_paid": 0, "penalties": c["penalty"],
                     "deposits": 0}
    clock.set(60)
    ex.tick()  # settled once only
    assert _balance(ex, "provider:p1") == -c["penalty"]


def test_a_provider_that_cannot_start_the_job_pays_its_penalty(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path)
    machines({"name": "p1"}).fail_start = True
    clock.set(20)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "failed" and "could not start" in done["note"]
    assert _balance(ex, "user:u1") == c["penalty"]


def test_a_window_missed_while_the_exchange_was_down_lapses_unbilled(tmp_path):
    ex, clock, machines, c = one_contract(tmp_path)
    clock.set(45)
    ex.execute()
    assert ex.store.contract(c["id"])["state"] == "lapsed"
    assert _balance(ex, "user:u1") == 0 and _balance(ex, "provider:p1") == 0
    assert not machines.by_name.get("p1") or not machines.by_name["p1"].started


op_st = st.one_of(
    st.tuples(st.just("request"), st.integers(1, 25), st.integers(1, 4), st.integers(1, 6), st.integers(0, 3),
              st.sampled_from(["u1", "u2"])),
    st.tuples(st.just("offer"), st.integers(0, 15), st.integers(1, 8), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("advance"), st.integers(1, 25)),
    st.tuples(st.just("end"), st.integers(0, 5), st.sampled_from([0, 1, 137, None])),
    st.tuples(st.just("fail"), st.integers(0, 5)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_st, min_size=1, max_size=40),
       mechanism=st.sampled_from(["critical-value", "k-pricing", "pay-as-bid"]))
def test_books_balance_after_any_sequence(tmp_path_factory, ops, mechanism):
    ex, clock, machines = make_exchange(tmp_path_factory.mktemp("x") / "x.db", mechanism=mechanism)
    for p in ("p1", "p2"):
        ex.join(p)
        for n in range(3):
            ex.add_node(p, f"n{n}", 4, 100)
    offered = 0
    for op in ops:
        now = ex.slot()
        if op[0] == "request":
            _, value, cpu, start, length, user = op
            ex.submit_request(user, value, cpu, 10, now + start, now + start + length, "true")
        elif op[0] == "offer":
            _, reserve, length, p = op
            try:
                ex.submit_offer(p, f"n{offered % 3}", reserve, now + 1, now + length)
            except ValueError as exc:
                assert "already has open offer" in str(exc)
            offered += 1
        elif op[0] == "advance":
            clock.advance(op[1])
        else:
            running = sorted((cid, m) for m in machines.by_name.values() for cid in m.live)
            if running:
                cid, m = running[op[1] % len(running)]
                if op[0] == "fail":
                    m.fail(cid)
                else:
                    m.exit(cid, op[2])
        ex.tick()
    clock.advance(1000)
    ex.tick()
    books = ex.store.check_books()
    assert not ex.open_contracts()
    bal = ex.store.balances()
    assert sum(bal.values()) == 0
    assert bal[CLEARING] == books["users_paid"] - books["providers_paid"]
    for c in ex.store.contracts():  # every job started inside its window, at most once
        starts = [t for m in machines.by_name.values() for cid, t, _ in m.started if cid == c["id"]]
        if c["state"] == "lapsed":
            assert starts == []
        else:
            assert len(starts) == 1 and c["start_t"] <= starts[0] < c["end_t"]


def test_a_job_the_provider_never_ran_in_its_window_is_its_failure(tmp_path):
    """A Slurm-like provider accepted the job but left it pending past the window's end."""
    ex, clock, machines, c = one_contract(tmp_path)
    m = machines({"name": "p1"})
    clock.set(21)
    ex.tick()
    m.pending.add(c["id"])
    clock.set(40)
    ex.tick()
    done = ex.store.contract(c["id"])
    assert done["state"] == "failed" and "had not started" in done["note"]
    assert _balance(ex, "user:u1") == c["penalty"]
