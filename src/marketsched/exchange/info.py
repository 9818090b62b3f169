"""Market information (the core market service of Stößer 2009, section 2.3): per clearing
period, the volume traded and the clearing price per attribute class, and the open interest;
and the open book, in aggregate.

Everything is derived from the recorded facts (orders, periods, contracts), so it is the same
after a restart and in a replay. The attribute class of a contract is the CPU units of its
request; the clearing price of a class is what its users pay per CPU unit per slot (the
volume-weighted mean over the class's contracts of the period).
"""

from __future__ import annotations

from .store import MICRO, ExchangeStore

_PERIOD_COLUMNS = ("id", "t", "requests", "offers", "last_order", "latency")


def market_info(store: ExchangeStore, after: int | None = None, limit: int | None = None) -> list[dict]:
    """One row per period, oldest first: ``period, t, requests, offers, contracts, cpu_slots,
    volume`` (currency units paid by users), ``price`` (per CPU unit per slot, None if nothing
    traded), ``open_interest`` (orders still open right after the clearing), ``classes``:
    ``{cpu: {"cpu_slots", "price"}}`` and ``latency`` (seconds the clearing took). All periods;
    with ``after``, those after period ``after``; with ``limit``, at most that many (the oldest
    after ``after``; without it, the newest)."""
    cols = ", ".join(_PERIOD_COLUMNS)
    if after is not None:
        sql, params = f"SELECT {cols} FROM ex_periods WHERE id > ? ORDER BY id", [after]
        if limit is not None:
            sql, params = sql + " LIMIT ?", params + [limit]
    elif limit is not None:
        sql, params = f"SELECT * FROM (SELECT {cols} FROM ex_periods ORDER BY id DESC LIMIT ?) ORDER BY id", [limit]
    else:
        sql, params = f"SELECT {cols} FROM ex_periods ORDER BY id", []
    periods = store.dicts(_PERIOD_COLUMNS, sql, params)
    if not periods:
        return []
    lo, hi = periods[0]["id"], periods[-1]["id"]
    per_class: dict[int, dict[int, list[int]]] = {}
    counts: dict[int, int] = {}
    for period, cpu, n, cpu_slots, paid in store.rows(
            "SELECT period, cpu, COUNT(*), SUM(cpu * (last_slot - first_slot + 1)), SUM(user_price) FROM ex_contracts "
            "WHERE period BETWEEN ? AND ? GROUP BY period, cpu ORDER BY period, cpu", (lo, hi)):
        per_class.setdefault(period, {})[cpu] = [cpu_slots, paid]
        counts[period] = counts.get(period, 0) + n
    out = []
    for p in periods:
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


def open_book(store: ExchangeStore) -> list[dict]:
    """The open orders in aggregate, per side and CPU class: ``side, cpu, orders, cpu_slots``
    (no owner, no price: what each party bid stays its own)."""
    return store.dicts(("side", "cpu", "orders", "cpu_slots"),
                       "SELECT side, cpu, COUNT(*), SUM(cpu * (last_slot - first_slot + 1)) FROM ex_orders "
                       "WHERE state = 'open' GROUP BY side, cpu ORDER BY side DESC, cpu")


def lowered_capacity(store: ExchangeStore) -> dict | None:
    """What the last clearing could sell below the nodes' registered CPU units, and why, as its
    book recorded it (:class:`.book.ClearingBook`'s ``caps`` and ``why``: a local node's CPUs
    offline or outside the exchange's CPU set, a Slurm partition with fewer CPUs up):
    ``{"period", "nodes": [{"node_id", "node", "registered", "sells", "why"}]}``, nodes in id
    order (empty: every offered node sold its registered units); None before any clearing.
    Steps: read the last period's book; for each node it gives a reason for, look its name up."""
    import json

    rows = store.rows("SELECT id, book FROM ex_periods ORDER BY id DESC LIMIT 1")
    if not rows:
        return None
    period, text = rows[0]
    book = json.loads(text)
    why = {int(k): v for k, v in book.get("why", {}).items()}
    caps = {int(k): v for k, v in book.get("caps", {}).items()}
    nodes = store.nodes()
    out = []
    for node_id in sorted(why):
        n = nodes.get(node_id)
        out.append({"node_id": node_id, "node": f"{n['provider']}/{n['name']}" if n else str(node_id),
                    "registered": n["cpu"] if n else None, "sells": caps.get(node_id), "why": why[node_id]})
    return {"period": period, "nodes": out}


def runs(row: list) -> list[list]:
    """A price-table row (``None``: not offered) as runs of equal consecutive cells,
    ``[[price, columns], ...]``, in column order: a table is mostly long flat stretches, so this is
    what the information page shows of it (exact: expanding the runs gives the row back)."""
    out: list[list] = []
    for x in row:
        if out and out[-1][0] == x:
            out[-1][1] += 1
        else:
            out.append([x, 1])
    return out


def egg_market(eggm, clock: float) -> dict:
    """Egg mode's market information (Kang & Parkes 2007 on the exchange, :mod:`.egg`), read at
    ``clock``: ``providers``, per provider its reliability, record and full table ``prices``
    (:func:`.egg.reliability`: what the price agents read), ``table`` (its price table compact: one list of :func:`runs` per resource bucket, row-major,
    columns from slot ``base_slot``; None once it left), ``contracts`` (its Egg contracts per
    state) and ``escrow_held`` (currency units held in escrow for its contracts); and for the
    exchange ``contracts`` (per ``state/escrow``) and ``escrow_held`` (``{"count", "amount"}``),
    as :func:`.egg_books.summary` gives them. Steps: the providers' rows; one grouped read of the
    contracts per provider and state, one of the escrow still held per provider."""
    from .egg import reliability
    from .egg_books import summary

    store = eggm.store
    rows = reliability(eggm, clock)
    per_state: dict[str, dict[str, int]] = {}
    for provider, state, n in store.rows("SELECT provider, state, COUNT(*) FROM ex_egg_contracts "
                                         "GROUP BY provider, state ORDER BY provider, state"):
        per_state.setdefault(provider, {})[state] = n
    held = dict(store.rows("SELECT provider, SUM(price) FROM ex_egg_contracts WHERE escrow NOT IN "
                           "('paid', 'refunded') GROUP BY provider"))
    shape = eggm.market.book.prices.shape[1:] if eggm.market is not None else None
    providers = []
    for r in rows:
        table = None
        if r["prices"] is not None and shape is not None:
            flat, width = _flat(r["prices"]), shape[-1]
            table = [runs(flat[i:i + width]) for i in range(0, len(flat), width)]
        providers.append({**r, "table": table,
                          "contracts": per_state.get(r["provider"], {}),
                          "escrow_held": held.get(r["provider"], 0) / MICRO})
    return {"providers": providers, **summary(store)}


def _flat(nested) -> list:
    """The cells of a nested list, row-major."""
    return [y for x in nested for y in _flat(x)] if isinstance(nested, list) else [nested]
