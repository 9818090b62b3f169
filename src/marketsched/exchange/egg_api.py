"""The HTTP routes of Egg mode (:mod:`.egg`), under ``/api/egg/``, on the exchange's API (:mod:`.api`).

======  ========================  ================================================================
method  path                      what
======  ========================  ================================================================
GET     ``/api/egg/market``       public: time, slot, Egg settings, every provider's reliability,
                                  record, price table (full and compact; none once it left),
                                  contracts by state and escrow held, and the exchange's
                                  contracts by state and escrow held (:func:`.info.egg_market`)
POST    ``/api/egg/prices``       provider: ``{"prices": [...]}`` its own table, flat, row by row
                                  (buckets, then slot columns from the current slot; ``null``: not
                                  offered); 400 names each cell that breaks definition 6 of Kang &
                                  Parkes (2007)
POST    ``/api/egg/bids``         user: ``{"description", "value", "deadline"}`` or ``{"description",
                                  "until", "values"}``, with ``min_reliability``, ``cpu``, ``mem``,
                                  ``command``;
                                  answers the award (provider, ``tau``, price) or ``scheduled: false``
GET     ``/api/egg/contracts``    own Egg contracts (a user's or a provider's), newest last
======  ========================  ================================================================

The provider a table is for is the token's party, never a field of the body (an unknown field is
refused), so no provider posts another's table; money moves only by the library's rules (escrow
at the award, release or refund at ``tau*``), never on a party's say-so.
"""

from __future__ import annotations

from marketsched.platform.http import INT, NUM, STR, Route
from marketsched.platform.validation import MarketError

from . import egg
from .info import egg_market

MAX_LISTED = 200  # contracts one answer lists (the newest)


def _call(s, fn, *args):
    """``fn(egg market, *args, now)`` in one transaction, on the service's lock (400 naming a
    ValueError); the in-memory market is rebuilt from the events after any error."""
    ex = s.exchange

    def run():
        eggm = ex.egg
        try:
            with s.store.transaction():
                return fn(eggm, *args, ex.clock())
        except BaseException:
            eggm.drop()
            raise

    return s._do(run)


def _role(who, role: str, what: str) -> None:
    if who[0] != role:
        raise MarketError(f"only {role}s {what}; this token is {who[0]} {who[1]!r}'s", 403)


def post_prices(s, who, body: dict) -> dict:
    _role(who, "provider", "post price tables")
    if "prices" not in body:
        raise MarketError("a price table needs the field 'prices'")
    return _call(s, egg.post_prices, who[1], body["prices"])


def bid(s, who, body: dict) -> dict:
    _role(who, "user", "bid")
    return _call(s, egg.submit_bid, who[1], body)


def market(s) -> dict:
    ex = s.exchange
    return _call(s, lambda eggm, now: {"t": now, "slot": ex.slot(now), "slot_seconds": eggm.slot,
                                        "settings": eggm.cfg, **egg_market(eggm, now)})


def own_contracts(s, who) -> list[dict]:
    rows = s._locked(lambda: egg.contracts(s.store, None, f"{who[0]} = ?", (who[1],)))
    return [{**c, "price": c["price"] / egg.MICRO} for c in rows[-MAX_LISTED:]]


NUMBERS = {"type": "array", "items": NUM}
ROUTES = [
    Route("GET", "/api/egg/market", lambda s, who, q, body: market(s),
          "Egg: providers' reliability, records and price tables", auth=False),
    Route("POST", "/api/egg/prices", lambda s, who, q, body: post_prices(s, who, body),
          "Egg provider: post the own price table", noun="a price table", required=("prices",),
          body={"prices": {"type": "array", "description": "buckets x slot columns, row by row (null: not offered)"}}),
    Route("POST", "/api/egg/bids", lambda s, who, q, body: bid(s, who, body), "Egg user: bid", noun="a bid",
          required=("description", "command"),
          body={"description": NUMBERS, "value": NUM, "deadline": {**NUM, "description": "seconds after arrival"},
                "value_end": {**NUM, "description": "the value at the deadline (linear from 'value'; default equal)"},
                "until": {**NUMBERS, "description": "step schedule: seconds after arrival"},
                "values": {**NUMBERS, "description": "step schedule: value until until[i]"},
                "min_reliability": NUM, "cpu": INT, "mem": INT, "command": STR}),
    Route("GET", "/api/egg/contracts", lambda s, who, q, body: own_contracts(s, who), "Egg: own contracts"),
]
