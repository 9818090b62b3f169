"""A party's account, shared by every live market: its ledger entries signed from its side, and
how the command lines print balances and statements (``marketsched market balance|statement``,
``marketsched exchange balance|statement``), so both print the same columns.

Amounts in the ledger are integer micro-units (:data:`marketsched.platform.ledger.MICRO`); what
these functions return and print is in currency units.
"""

from __future__ import annotations

import click

from .ledger import MICRO, Store


def money(x) -> str:
    """An amount as the command lines print it: up to six decimals, no trailing zeros; ``-``
    for none."""
    return "-" if x is None else f"{x:.6f}".rstrip("0").rstrip(".") if x else "0"


def signed_entries(store: Store, account: str, limit: int | None = 200, before: int | None = None) -> list[dict]:
    """The ledger entries of ``account``, oldest first (the newest ``limit``, with ids below
    ``before`` if given), amounts in currency units, each with ``signed``: ``+amount`` when
    money came into the account, ``-amount`` when it left."""
    return [{**e, "amount": e["amount"] / MICRO,
             "signed": (e["amount"] if e["to_account"] == account else -e["amount"]) / MICRO}
            for e in store.entries(account, limit=limit, before=before)]


def echo_statement(statement: dict, ref: str = "job") -> None:
    """Print a statement (``{"balance", "entries"}``): one line per entry (id, time, kind, signed
    amount, and the ``ref`` the entry is for: a job, a contract), then the balance."""
    width = max([8, *(len(e["kind"]) for e in statement["entries"])])  # the exchange's kinds are longer
    for e in statement["entries"]:
        what = "" if e["job_id"] is None else f"{ref} {e['job_id']}"
        click.echo(f"{e['id']:>6} {e['t']:>10.2f} {e['kind']:<{width}} {e['signed']:>+14.6f}  {what}")
    click.echo(f"balance {money(statement['balance'])}")


def echo_balance_rows(rows) -> None:
    """Print ``(name, amount, note)`` rows as the operator's balance listing: name, amount and,
    if any, the note in brackets."""
    for name, amount, note in rows:
        click.echo(f"{name:<16} {money(amount):>14}" + (f"  ({note})" if note else ""))
