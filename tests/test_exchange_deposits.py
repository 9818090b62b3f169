"""Users' deposits on the exchange: an exchange made with `deposits` takes a request only if
the user's available balance (deposits and settlements less what its open requests may cost
and its unsettled contracts' prices) covers what the request may cost; the books balance and
no user's balance goes below zero, whatever the mechanism."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from exchange_helpers import make_exchange
from marketsched.cli import main
from marketsched.exchange.store import DEPOSITS, MICRO, user_account


def _money(ex, user):
    return {k: v / MICRO for k, v in ex.store.available(user).items()}


def test_a_request_beyond_the_available_deposit_is_refused(tmp_path):
    ex, clock, machines = make_exchange(tmp_path / "x.db", deposits=True)
    with pytest.raises(ValueError, match=r"request field 'value': the request may cost up to 6\.000000 \(value x CPU "
                                         r"x slots\), more than the 0\.000000 'alice' has available"):
        ex.submit_request("alice", 1.0, 2, 0, 2, 4, "true")
    assert ex.store.orders() == []
    ex.deposit("alice", 10)
    ex.submit_request("alice", 1.0, 2, 0, 2, 4, "true")  # may cost 1 x 2 x 3 = 6
    assert _money(ex, "alice") == {"balance": 10.0, "committed": 6.0, "available": 4.0}
    with pytest.raises(ValueError, match=r"up to 5\.000000 .* more than the 4\.000000 'alice' has available "
                                         r"\(deposited balance 10\.000000 less 6\.000000 committed"):
        ex.submit_request("alice", 1.0, 1, 0, 2, 6, "true")
    second = ex.submit_request("alice", 1.0, 1, 0, 2, 5, "true")  # exactly what is left
    assert _money(ex, "alice")["available"] == 0.0
    ex.cancel("alice", second)  # a cancelled request's commitment ends
    assert _money(ex, "alice")["available"] == 4.0
    # another user's deposit is its own
    with pytest.raises(ValueError, match="'bob' has available"):
        ex.submit_request("bob", 0.5, 1, 0, 2, 2, "true")


def test_settlement_moves_the_commitment_into_the_balance(tmp_path):
    ex, clock, machines = make_exchange(tmp_path / "x.db", deposits=True, mechanism="pay-as-bid", penalty=0.5)
    ex.join("p")
    ex.add_node("p", "n0", 4, 100)
    ex.submit_offer("p", "n0", 0.5, 1, 100)
    ex.deposit("alice", 20)
    ex.submit_request("alice", 2.0, 2, 0, 2, 3, "true")  # 8
    ex.submit_request("alice", 1.0, 2, 0, 5, 6, "true")  # 4
    ex.clear()
    first, second = ex.store.contracts()
    assert (first["user_price"], second["user_price"]) == (8 * MICRO, 4 * MICRO)  # pay-as-bid: the bid
    assert _money(ex, "alice") == {"balance": 20.0, "committed": 12.0, "available": 8.0}
    clock.advance(20)  # slot 2: the first starts; it runs its whole window and is delivered
    ex.tick()
    clock.advance(20)
    ex.tick()
    assert ex.store.contract(first["id"])["state"] == "delivered"
    assert _money(ex, "alice") == {"balance": 12.0, "committed": 4.0, "available": 8.0}
    clock.advance(10)  # slot 5: the second starts; its node dies: the provider pays the penalty
    ex.tick()
    machines.by_name["p"].fail(second["id"])
    ex.tick()
    assert ex.store.contract(second["id"])["state"] == "failed"
    assert _money(ex, "alice") == {"balance": 14.0, "committed": 0.0, "available": 14.0}
    books = ex.store.check_books()
    assert books["deposits"] == 20 * MICRO and ex.store.balances()[DEPOSITS] == -20 * MICRO


@pytest.mark.parametrize("mechanism", ["critical-value", "k-pricing", "pay-as-bid"])
def test_no_users_balance_goes_below_zero(tmp_path, mechanism):
    """Random requests of five users with small deposits against two providers for 40 periods;
    every contract runs its window. After every step: no user's balance or available money is
    below zero and the books balance; every refused request was one its user could not cover."""
    ex, clock, machines = make_exchange(tmp_path / "x.db", deposits=True, mechanism=mechanism,
                                        slot_seconds=10, period_seconds=10)
    rng = np.random.default_rng(7)
    for p, reserve in (("p1", 0.5), ("p2", 1.5)):
        ex.join(p)
        ex.add_node(p, "n0", 4, 100)
        ex.submit_offer(p, "n0", reserve, 1, 500)
    users = [f"u{i}" for i in range(5)]
    for u in users:
        ex.deposit(u, float(rng.integers(5, 30)))
    refused = taken = 0
    for _ in range(40):
        for u in users:
            first = ex.slot() + int(rng.integers(1, 4))
            value, cpu, last = round(float(rng.uniform(0.2, 4.0)), 2), int(rng.integers(1, 4)), first + int(
                rng.integers(0, 3))
            before = ex.store.available(u)["available"]
            try:
                ex.submit_request(u, value, cpu, 0, first, last, "true")
                taken += 1
            except ValueError as exc:
                assert "has available" in str(exc)
                assert round(value * cpu * (last - first + 1) * MICRO) > before
                refused += 1
        ex.tick()
        clock.advance(10)
        for u in users:
            money = ex.store.available(u)
            assert money["balance"] >= 0 and money["available"] >= 0, (u, money)
        ex.store.check_books()
    assert taken > 20 and refused > 10  # the deposits bind, and trade goes on
    assert sum(ex.store.balances().values()) == 0
    paid = sum(c["user_price"] for c in ex.store.contracts(("delivered",)))
    assert paid > 0 and sum(ex.store.balances()[user_account(u)] for u in users) == -ex.store.balances()[DEPOSITS] \
        - paid + sum(c["penalty"] for c in ex.store.contracts(("failed",)))


@pytest.mark.parametrize("amount", [0, -1, float("nan"), float("inf"), 1e10, "5", True, 1e-9])
def test_bad_deposits_name_the_field(tmp_path, amount):
    ex, clock, machines = make_exchange(tmp_path / "x.db", deposits=True)
    with pytest.raises(ValueError, match="deposit field 'amount' must be a finite number"):
        ex.deposit("alice", amount)
    with pytest.raises(ValueError, match="deposit field 'user'"):
        ex.deposit("../alice", 1)
    assert ex.store.check_books()["deposits"] == 0


def test_without_deposits_users_trade_on_credit_and_old_exchanges_keep_doing_so(tmp_path):
    ex, clock, machines = make_exchange(tmp_path / "x.db")
    ex.submit_request("alice", 1.0, 2, 0, 2, 4, "true")
    assert _money(ex, "alice") == {"balance": 0.0, "committed": 6.0, "available": -6.0}
    # an exchange made before the setting existed has none recorded: credit
    ex.store.conn.execute("DELETE FROM meta WHERE key = 'exchange.deposits'")
    assert ex.store.settings()["deposits"] == 0


def test_cli_init_deposits_deposit_and_a_refused_request(tmp_path):
    data = str(tmp_path / "ex")
    run = CliRunner().invoke
    assert run(main, ["exchange", "init", data, "--deposits"]).exit_code == 0
    out = run(main, ["exchange", "deposit", data, "alice", "3"])
    assert out.exit_code == 0 and "alice: balance 3.000000, available 3.000000" in out.output
    out = run(main, ["exchange", "deposit", data, "alice", "0"])
    assert out.exit_code != 0 and "deposit field 'amount'" in out.output
    request = ["exchange", "request", data, "alice", "--value", "2", "--cpu", "1", "--first-slot", "10",
               "--command", "true"]
    out = run(main, request + ["--last-slot", "11"])  # may cost 4
    assert out.exit_code != 0 and "more than the 3.000000 'alice' has available" in out.output
    assert run(main, request + ["--last-slot", "10"]).exit_code == 0  # 2


def test_per_slot_rounding_never_takes_a_balance_below_zero(tmp_path):
    """Pay-as-bid charges the sum of its per-slot prices, which float rounding put one micro-unit
    above value x cpu x slots (65,625,964.8 over 704 slots): a payment is cut at the bid."""
    ex, clock, _ = make_exchange(tmp_path / "x.db", deposits=True, mechanism="pay-as-bid")
    ex.join("p")
    ex.add_node("p", "n", 100, 0)
    ex.submit_offer("p", "n", 0.0, 1, 800)
    ex.deposit("alice", 65625964.8)  # exactly value x cpu x slots
    ex.submit_request("alice", 932.187, 100, 0, 2, 705, "true")
    ex.clear()
    (c,) = ex.store.contracts()
    assert c["user_price"] == round(932.187 * 100 * 704 * MICRO)  # the bid, not a micro-unit more
    assert ex.store.available("alice")["available"] >= 0
    ex.store.check_books()


def test_a_request_the_ledger_cannot_hold_is_refused(tmp_path):
    ex, clock, _ = make_exchange(tmp_path / "x.db", mechanism="pay-as-bid")
    with pytest.raises(ValueError, match="more than the 1e\\+12 one request may cost"):
        ex.submit_request("alice", 1e9, 10_000, 0, 2, 2, "true")
