"""The books of Egg mode on the exchange: its contracts' columns, its ledger entries and escrow
account, and the check that each contract's escrow moved exactly once
(:meth:`.store.ExchangeStore.check_books` calls it; :mod:`.egg` runs the mode)."""

from __future__ import annotations

from marketsched.platform.query import select

from .posted import check_posted

# ``store`` below is an :class:`.store.ExchangeStore`, not imported: the store calls this module.

ESCROW = "exchange:escrow"
KINDS = ("egg-escrow", "egg-release", "egg-refund")  # the ledger entries of Egg mode
COLUMNS = ("id", "event", "user", "provider", "node_id", "cpu", "mem", "command", "value", "price", "entry",
           "award_t", "tau", "slot", "state", "started_t", "ended_t", "exit_code", "cpu_seconds", "note", "escrow",
           "settled_t")


def contracts(store, states=None, where: str = "", params=()) -> list[dict]:
    """Egg mode's contracts in id order: in ``states``, and passing ``where`` (one SQL clause,
    its ``?`` taking ``params``) when given."""
    sql, args = select("ex_egg_contracts", COLUMNS, [(where, tuple(params))] if where else [], states)
    return store.dicts(COLUMNS, sql, args)


def summary(store) -> dict:
    """What ``exchange status`` and ``exchange egg status`` show of Egg mode's contracts:
    ``contracts``, the count per ``state/escrow`` (e.g. ``delivered/held``), and ``escrow_held``,
    ``{"count", "amount"}``: the contracts whose escrow is neither paid nor refunded and the sum
    of their prices in currency units (what the escrow account holds, by :func:`check_books`)."""
    from marketsched.platform.ledger import MICRO

    by: dict[str, int] = {}
    count = amount = 0
    for state, escrow, n, paid in store.rows("SELECT state, escrow, COUNT(*), SUM(price) FROM ex_egg_contracts "
                                             "GROUP BY state, escrow ORDER BY state, escrow"):
        by[f"{state}/{escrow}"] = n
        if escrow not in ("paid", "refunded"):
            count, amount = count + n, amount + paid
    return {"contracts": by, "escrow_held": {"count": count, "amount": amount / MICRO}}


def check_books(store, posted: dict[tuple[int, str], int]) -> None:
    """The Egg part of :meth:`ExchangeStore.check_books`: each contract's price was put in escrow
    once, and paid out (delivered) or refunded (failed, lapsed) once its escrow was settled, and
    the escrow account holds exactly the prices still held. AssertionError naming the first
    contract that does not add up."""
    held = 0
    wanted = []
    for c in contracts(store):
        want = {"egg-escrow": c["price"]}
        if c["escrow"] == "paid":
            want["egg-release"] = c["price"]
        elif c["escrow"] == "refunded":
            want["egg-refund"] = c["price"]
        else:
            held += c["price"]
        wanted.append((c["id"], f"Egg contract {c['id']} ({c['state']}, escrow {c['escrow']})", want))
    check_posted(posted, wanted, KINDS, "Egg ledger entries for no Egg contract")
    balance = store.ledger.balance(ESCROW) if store.rows("SELECT 1 FROM accounts WHERE name = ?", (ESCROW,)) else 0
    if balance != held:
        raise AssertionError(f"the escrow account holds {balance}, expected {held} (the prices still held)")
