"""Market information (the core market service of Stößer 2009, section 2.3): per clearing
period, the volume traded and the clearing price per attribute class, and the open interest.

Everything is derived from the recorded facts (orders, periods, contracts), so it is the same
after a restart and in a replay. The attribute class of a contract is the CPU units of its
request; the clearing price of a class is what its users pay per CPU unit per slot (the
volume-weighted mean over the class's contracts of the period).
"""

from __future__ import annotations

from .store import MICRO, ExchangeStore


def market_info(store: ExchangeStore) -> list[dict]:
    """One row per period: ``period, t, requests, offers, contracts, cpu_slots, volume``
    (currency units paid by users), ``price`` (per CPU unit per slot, None if nothing traded),
    ``open_interest`` (orders still open right after the clearing) and ``classes``:
    ``{cpu: {"cpu_slots", "price"}}``."""
    out = []
    per_class: dict[int, dict[int, list[int]]] = {}
    for period, cpu, cpu_slots, paid in store.rows(
            "SELECT period, cpu, SUM(cpu * (last_slot - first_slot + 1)), SUM(user_price) FROM ex_contracts "
            "GROUP BY period, cpu ORDER BY period, cpu"):
        per_class.setdefault(period, {})[cpu] = [cpu_slots, paid]
    counts = dict(store.rows("SELECT period, COUNT(*) FROM ex_contracts GROUP BY period"))
    for p in store.periods():
        classes = per_class.get(p["id"], {})
        cpu_slots = sum(v[0] for v in classes.values())
        paid = sum(v[1] for v in classes.values())
        open_interest = store.rows(
            "SELECT COUNT(*) FROM ex_orders WHERE id <= ? AND (closed_t IS NULL OR closed_t > ?)",
            (p["last_order"], p["t"]))[0][0]
        out.append({"period": p["id"], "t": p["t"], "requests": p["requests"], "offers": p["offers"],
                    "contracts": counts.get(p["id"], 0), "cpu_slots": cpu_slots, "volume": paid / MICRO,
                    "price": paid / MICRO / cpu_slots if cpu_slots else None, "open_interest": open_interest,
                    "classes": {cpu: {"cpu_slots": v[0], "price": v[1] / MICRO / v[0]} for cpu, v in classes.items()},
                    "latency": p["latency"]})
    return out
