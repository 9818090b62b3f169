"""The trust rule of contracts run by their provider's agent (:mod:`marketsched.exchange.agent_runs`),
checked against a plain restatement on random outcomes: reports posted through the API's
functions in process (no agent process, a fake clock), at random times, with random ends and
exit statuses; the exchange settles at the reports and at the deadlines. Books exact."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest

from exchange_helpers import agent_exchange
from marketsched.exchange.agent_runs import REPORT_GRACE, report_ended
from marketsched.exchange.api import ExchangeService
from marketsched.exchange.store import ExchangeStore
from marketsched.platform.clock import FakeClock
from marketsched.platform.validation import MarketError


def reference(report: tuple | None) -> str:
    """The trust rule, plainly: delivered only for a report taken by the deadline saying the
    job exited 0 or still ran at its window's end; anything else fails, at the provider's cost."""
    if report is None:
        return "failed"
    end, code, on_time = report
    return "delivered" if on_time and (end == "window" or (end == "exit" and code == 0)) else "failed"


def body(end: str, code: int | None) -> dict:
    out = b"result\n"
    got = {"end": end, "digest": hashlib.sha256(out).hexdigest(), "output": base64.b64encode(out).decode(),
           "output_bytes": len(out)}
    return got if code is None else {**got, "code": code}


@pytest.mark.parametrize("seed", range(4))
def test_random_reports_settle_by_the_trust_rule(tmp_path, seed):
    rng = np.random.default_rng(seed)
    data = tmp_path / "ex"
    clock = FakeClock()
    ex = agent_exchange(data, clock, ("p",), 8, 512, 40)
    for u in range(6):
        ex.submit_request(f"u{u}", 5.0, 1, 8, 2, 2, "true")  # one slot, six contracts at once
    ex.clear()
    contracts = ex.store.contracts()
    assert len(contracts) == 6
    service = ExchangeService(ExchangeStore(data), clock)
    c0 = contracts[0]
    clock.set(c0["start_t"])
    ex.execute()  # every run published
    deadline = c0["end_t"] + REPORT_GRACE
    # each contract: no report, or a report (end, code) at a time before or after the deadline
    plan: dict[int, tuple | None] = {}
    for c in contracts:
        if rng.random() < 0.2:
            plan[c["id"]] = None
            continue
        end = str(rng.choice(["exit", "window", "signal", "not-started"]))
        code = int(rng.choice([0, 0, 1, 3])) if end == "exit" else None
        at = float(rng.choice([c0["start_t"] + 1, c0["end_t"], deadline - 1, deadline, deadline + 5]))
        plan[c["id"]] = (end, code, at)
    for cid, p in sorted(plan.items(), key=lambda kv: kv[1][2] if kv[1] else 0.0):
        if p is None:
            continue
        clock.set(max(clock(), p[2]))
        if p[2] < deadline:
            report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        else:
            with pytest.raises(MarketError, match="is late"):
                report_ended(service, ("provider", "p"), cid, body(p[0], p[1]))
        ex.execute()
    clock.set(max(clock(), deadline))
    ex.execute()
    for c in ex.store.contracts():
        p = plan[c["id"]]
        want = reference(None if p is None else (p[0], p[1], p[2] < deadline))
        assert c["state"] == want, (c["id"], p, c["note"])
    ex.store.check_books()
    user = sum(ex.store.ledger.balance(f"user:u{u}") for u in range(6))
    paid = sum(c["user_price"] for c in ex.store.contracts() if c["state"] == "delivered")
    penalties = sum(c["penalty"] for c in ex.store.contracts() if c["state"] == "failed")
    assert user == penalties - paid
    service.store.close()
    service.close()
    ex.store.close()
