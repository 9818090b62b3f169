"""Re-clearing a recorded session offline.

A session is its database: providers, nodes, every order with its id (and, for a cancelled
one, the last clearing before its cancellation), and every clearing with its time, first slot
and the last order id it saw. :func:`replay_session` builds a fresh
exchange from these alone, submits the orders in id order, clears at the recorded moments with
the same settings (and so the same random numbers) and the capacity each node could sell then,
and returns the contracts it makes; for a faithful record they are the recorded contracts, field
for field. A contract the exchange moved off lost capacity (``ex_moves``) is moved in the replay
right after the clearing that preceded the move, so the later clearings see the same capacity
sold. Execution outcomes do not enter: a contract's slots stay sold whatever became of it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .book import ClearingBook
from .core import clear_period
from .provider_protocol import recorded_gathers
from .store import ExchangeStore

CONTRACT_TERMS = ("period", "request_id", "offer_id", "user", "provider", "node_id", "cpu", "mem", "first_slot",
                  "last_slot", "start_t", "end_t", "user_price", "provider_price", "penalty")


def contract_terms(store: ExchangeStore) -> list[dict]:
    """Every contract's terms (what the clearing decided; not what execution made of it)."""
    return [{k: c[k] for k in CONTRACT_TERMS} for c in store.contracts()]


def replay_session(recorded: ExchangeStore) -> list[dict]:
    """The contract terms an offline re-clearing of ``recorded`` makes (see the module docstring)."""
    settings = recorded.settings()
    if settings is None:
        raise ValueError(f"{recorded.path} holds no exchange")
    with tempfile.TemporaryDirectory(prefix="exchange-replay-") as tmp:
        fresh = ExchangeStore(Path(tmp) / "replay.db", sync="normal")
        try:
            fresh.init_settings(**settings)
            for p in recorded.providers():
                fresh.add_provider(p["name"], p["kind"], p["joined"], p["partition"])
            for node in recorded.nodes().values():
                fresh.add_node(node, node_id=node["id"])
            orders = recorded.orders()
            cancels: dict[int, list[dict]] = {}
            for o in orders:
                if o["state"] == "cancelled":
                    cancels.setdefault(o["closed_after"], []).append(o)
            moved: dict[int, list[dict]] = {}
            for m in recorded.moves():
                moved.setdefault(m["after_period"], []).append(m)
            pos = 0
            answers = recorded_gathers(recorded)  # the provider agents' recorded answers
            for period in recorded.periods():
                while pos < len(orders) and orders[pos]["id"] <= period["last_order"]:
                    o = orders[pos]
                    fresh.insert_order(o["side"], o, o["submit_t"], order_id=o["id"])
                    pos += 1
                with fresh.transaction():
                    for o in cancels.get(period["id"] - 1, []):
                        fresh.close_order(o["id"], "cancelled", o["closed_t"])
                clear_period(fresh, settings, period["t"], period["base_slot"], period["last_order"],
                             period["mechanism"], ClearingBook.from_json(period["book"]).caps, gathers=answers)
                _move(recorded, fresh, moved.get(period["id"], []))
            return contract_terms(fresh)
        finally:
            fresh.close()


def _move(recorded: ExchangeStore, fresh: ExchangeStore, moves: list[dict]) -> None:
    """Move the replay's contracts as the recorded ``moves`` (made after one clearing, before the
    next) moved the recorded ones; a contract is found by its terms, not its id."""
    with fresh.transaction():
        for m in moves:
            c = recorded.contract(m["contract_id"])
            rows = fresh.rows("SELECT id FROM ex_contracts WHERE period = ? AND request_id = ? AND offer_id = ? "
                              "AND first_slot = ? AND node_id = ?",
                              (c["period"], c["request_id"], c["offer_id"], c["first_slot"], m["from_node"]))
            if len(rows) != 1:
                raise ValueError(f"the record moved contract {m['contract_id']} from node {m['from_node']}, which the "
                                 "replay did not make there: the record and the replay disagree")
            fresh.move_contract(rows[0][0], m["to_node"], m["t"], m["why"])
