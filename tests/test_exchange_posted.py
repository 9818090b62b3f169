"""Each contract's ledger entries against what its state calls for
(:func:`marketsched.exchange.posted.check_posted`), and the exchange's books check refusing
an entry no settlement made."""

from __future__ import annotations

import random

import pytest

from exchange_helpers import one_contract
from marketsched.exchange.posted import check_posted
from marketsched.exchange.store import CLEARING, user_account

KINDS = ("a", "b")


def adds_up(posted, wanted) -> bool:
    """The definition: every (contract, kind) posted exactly what is wanted (0 if nothing),
    and every posted key belongs to a contract and one of the kinds."""
    keys = {(cid, k) for cid, _, _ in wanted for k in KINDS}
    return set(posted) <= keys and all(posted.get((cid, k), 0) == want.get(k, 0)
                                       for cid, _, want in wanted for k in KINDS)


def test_check_posted_equals_the_definition_on_random_books():
    rng = random.Random(7)
    for _ in range(300):
        wanted = [(cid, f"contract {cid}", {k: rng.choice((0, 1, 2)) for k in rng.sample(KINDS, rng.randint(0, 2))})
                  for cid in range(1, rng.randint(0, 3) + 1)]
        posted = {(cid, k): v for cid, _, want in wanted for k, v in want.items() if v}
        for _ in range(rng.randint(0, 2)):  # tamper: change, add or drop a sum, maybe for no contract
            key = (rng.randint(1, 4), rng.choice((*KINDS, "c")))
            if rng.random() < 0.3:
                posted.pop(key, None)
            else:
                posted[key] = rng.choice((1, 2))
        if adds_up(posted, wanted):
            check_posted(posted, wanted, KINDS, "stray")
        else:
            with pytest.raises(AssertionError):
                check_posted(posted, wanted, KINDS, "stray")


def test_check_posted_names_the_first_contract_and_the_stray_entries():
    wanted = [(1, "contract 1 (delivered)", {"a": 5}), (2, "contract 2 (failed)", {"b": 3})]
    with pytest.raises(AssertionError, match=r"^contract 1 \(delivered\): a posted 4, expected 5$"):
        check_posted({(1, "a"): 4, (2, "b"): 2}, wanted, KINDS, "stray")
    with pytest.raises(AssertionError, match=r"^contract 2 \(failed\): b posted 0, expected 3$"):
        check_posted({(1, "a"): 5}, wanted, KINDS, "stray")
    with pytest.raises(AssertionError, match=r"^entries for no contract: \[\(1, 'c'\), \(3, 'a'\)\]$"):
        check_posted({(1, "a"): 5, (2, "b"): 3, (3, "a"): 1, (1, "c"): 1}, wanted, KINDS, "entries for no contract")


def test_the_exchange_books_refuse_a_payment_no_settlement_made(tmp_path):
    ex, _, _, c = one_contract(tmp_path)
    assert ex.store.check_books()["users_paid"] == 0
    with ex.store.transaction():
        ex.store.ledger.post(0.0, "user-price", user_account("u1"), CLEARING, 7, job_id=c["id"])
    with pytest.raises(AssertionError, match=f"contract {c['id']} \\(pending\\): user-price posted 7, expected 0"):
        ex.store.check_books()
