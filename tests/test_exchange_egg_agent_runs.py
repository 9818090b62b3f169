"""Egg contracts run by their provider's agent (provider kind ``agent``; :mod:`marketsched.exchange.agent_runs`,
:mod:`marketsched.exchange.egg_run`), checked against a plain restatement of the trust rule and of Egg's
escrow (Kang & Parkes 2007, section 3, step 2) on random outcomes: reports posted through the API's
functions in process (no agent process, a fake clock) at random times, with random ends and exit
statuses; the exchange steps after each. The trust rule's plain restatement is the periodic
exchange's (:func:`test_exchange_agent_runs.reference`); the escrow is paid to the provider for a
delivered result and refunded otherwise, never before tau*. Books exact, events replayed to the
recorded choices."""

from __future__ import annotations

import numpy as np
import pytest

from exchange_helpers import egg_agent_exchange
from marketsched.exchange import egg
from marketsched.exchange.agent_runs import REPORT_GRACE, report_ended
from marketsched.exchange.api import ExchangeService
from marketsched.exchange.core import Exchange
from marketsched.exchange.providers import provider_backends
from marketsched.exchange.store import MICRO, ExchangeStore
from marketsched.platform.clock import FakeClock
from marketsched.platform.validation import MarketError
from test_exchange_agent_runs import body, reference

USERS = 6


@pytest.mark.parametrize("seed", range(3))
def test_random_egg_reports_settle_by_the_trust_rule_and_egg_escrow(tmp_path, seed):
    rng = np.random.default_rng(seed)
    data = tmp_path / "ex"
    clock = FakeClock(1000.0)
    ex = egg_agent_exchange(data, clock, ("p",), USERS, 512)
    store = ex.store
    service = ExchangeService(ExchangeStore(data), clock)
    with store.transaction():
        egg.post_prices(ex.egg, "p", [1.0] * 9 * 50, clock())
    awards = []
    for u in range(USERS):
        ex.deposit(f"u{u}", 100)
        with store.transaction():
            awards.append(egg.submit_bid(ex.egg, f"u{u}", {"description": [2], "value": 90, "deadline": 40,
                                                          "command": "true"}, clock()))
    assert all(a["scheduled"] and a["provider"] == "p" for a in awards)
    ex.tick()  # every run published
    by_id = {c["id"]: c for c in egg.contracts(store)}
    assert {c["state"] for c in by_id.values()} == {"running"}
    plan: dict[int, tuple | None] = {}
    for cid, c in by_id.items():
        if rng.random() < 0.2:
            plan[cid] = None
            continue
        end = str(rng.choice(["exit", "window", "signal", "not-started"]))
        code = int(rng.choice([0, 0, 1, 3])) if end == "exit" else None
        deadline = c["tau"] + REPORT_GRACE
        at = float(rng.choice([1000.5, c["tau"], deadline - 1, deadline, deadline + 5]))
        plan[cid] = (end, code, at)
    for cid, p in sorted(plan.items(), key=lambda kv: kv[1][2] if kv[1] else 0.0):
        if p is None:
            continue
        clock.set(max(clock(), p[2]))
        if p[2] < by_id[cid]["tau"] + REPORT_GRACE:
            report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        else:
            with pytest.raises(MarketError, match="is late"):
                report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        ex.tick()
        for c in egg.contracts(store):  # no escrow moves before tau* (rule R6)
            assert c["escrow"] == "held" or c["settled_t"] >= c["tau"]
    clock.set(max(clock(), max(c["tau"] for c in by_id.values()) + REPORT_GRACE))
    ex.tick()
    done = {c["id"]: c for c in egg.contracts(store)}
    paid = 0
    for cid, c in done.items():
        p = plan[cid]
        state = reference(None if p is None else (p[0], p[1], p[2] < c["tau"] + REPORT_GRACE))
        want = (state, "paid" if state == "delivered" else "refunded")  # Egg's escrow follows the verdict
        assert (c["state"], c["escrow"]) == want, (cid, p, c["note"])
        assert ex.store.ledger.balance(f"user:{c['user']}") == 100 * MICRO - (c["price"] if want[1] == "paid" else 0)
        paid += c["price"] if want[1] == "paid" else 0
    bal = store.balances()
    assert bal.get("provider:p", 0) == paid and bal.get(egg.ESCROW, 0) == 0
    successes = sum(c["state"] == "delivered" for c in done.values())
    (rel,) = egg.reliability(ex.egg, clock())
    assert (rel["completed"], rel["settled"]) == (successes, USERS)
    assert rel["reliability"] == pytest.approx((1 + successes) / (2 + USERS))
    store.check_books()
    assert egg.replay(store) == egg.recorded(store)
    service.store.close()
    service.close()
    ex.close()
    store.close()


def test_an_egg_agent_run_survives_a_restart_of_the_exchange(tmp_path):
    """The exchange is restarted (a new process's :class:`Exchange` on the same database, its
    recovery) after publishing an Egg contract's run: the run stays with its agent, whose report
    then delivers it, and the escrow is paid at tau*; a second contract with no report fails at
    tau* + the grace and is refunded."""
    data = tmp_path / "ex"
    clock = FakeClock(1000.0)
    ex = egg_agent_exchange(data, clock, ("p",), 2, 512)
    ex.deposit("u", 100)
    with ex.store.transaction():
        egg.post_prices(ex.egg, "p", [1.0] * 9 * 50, clock())
    cids = []
    for _ in range(2):
        with ex.store.transaction():
            cids.append(egg.submit_bid(ex.egg, "u", {"description": [2], "value": 90, "deadline": 40,
                                                     "command": "true"}, clock())["contract"])
    ex.tick()
    ex.close()
    ex.store.close()
    again = Exchange(ExchangeStore(data), clock, provider_backends(data))  # the same database, a new process
    again.single_user = True
    again.recover()
    assert [c["state"] for c in egg.contracts(again.store)] == ["running", "running"]
    service = ExchangeService(ExchangeStore(data), clock)
    report_ended(service, ("provider", "p"), cids[0], body("exit", 0))
    tau = max(c["tau"] for c in egg.contracts(again.store))
    clock.set(tau)
    again.tick()
    got = {c["id"]: c for c in egg.contracts(again.store)}
    assert (got[cids[0]]["state"], got[cids[0]]["escrow"]) == ("delivered", "paid")
    assert (got[cids[1]]["state"], got[cids[1]]["escrow"]) == ("running", "held")
    clock.set(tau + REPORT_GRACE)
    again.tick()
    got = {c["id"]: c for c in egg.contracts(again.store)}
    assert (got[cids[1]]["state"], got[cids[1]]["escrow"]) == ("failed", "refunded"), got[cids[1]]["note"]
    assert again.store.balances()["provider:p"] == got[cids[0]]["price"]
    again.store.check_books()
    assert egg.replay(again.store) == egg.recorded(again.store)
    service.store.close()
    service.close()
    again.close()
    again.store.close()
