"""How an agent reaches the exchange: in the same process (:class:`LocalAccess` for a user,
:class:`LocalProviderAccess` for a provider, on an :class:`~marketsched.exchange.core.Exchange`:
simulation, or the command line beside a running exchange) or over the HTTP API with the
party's token (:class:`ApiAccess`, :class:`ProviderApiAccess`). Both of a role answer the same
questions in the same units (currency units; market information as ``market_info`` rows), so
one agent runs on either.
"""

from __future__ import annotations

from .core import Exchange
from .info import market_info
from .store import MICRO

MAX_PAGE = 1000  # the API's largest page

# contracts whose price the user pays or may still pay (failed and lapsed ones cost nothing)
PAYING_CONTRACT_STATES = ("pending", "starting", "running", "delivered")


class LocalAccess:
    """User ``user`` on the exchange ``ex``, in the same process."""

    def __init__(self, ex: Exchange, user: str):
        self.ex, self.user = ex, user

    def slot(self) -> int:
        return self.ex.slot()

    def history(self, limit: int) -> list[dict]:
        return market_info(self.ex.store, limit=limit)

    def requests(self) -> list[dict]:
        """The user's requests, all states."""
        return [o for o in self.ex.store.orders("request") if o["owner"] == self.user]

    def paying_contracts(self) -> list[dict]:
        """The user's contracts in :data:`PAYING_CONTRACT_STATES`, ``user_price`` in currency units."""
        return [{**c, "user_price": c["user_price"] / MICRO}
                for c in self.ex.store.contracts(PAYING_CONTRACT_STATES) if c["user"] == self.user]

    def submit_request(self, value: float, cpu: int, mem: int, first_slot: int, last_slot: int, command: str) -> int:
        return self.ex.submit_request(self.user, value, cpu, mem, first_slot, last_slot, command)


class LocalProviderAccess:
    """Provider ``provider`` on the exchange ``ex``, in the same process."""

    def __init__(self, ex: Exchange, provider: str):
        self.ex, self.provider = ex, provider

    def slot(self) -> int:
        return self.ex.slot()

    def nodes(self) -> list[dict]:
        """The provider's nodes that have not left: ``id, name, cpu, mem``."""
        return [n for n in self.ex.store.nodes().values() if n["provider"] == self.provider and n["left_t"] is None]

    def open_offers(self) -> list[dict]:
        return [o for o in self.ex.store.orders("offer", "open") if o["owner"] == self.provider]

    def contracts(self) -> list[dict]:
        """The provider's contracts, all states."""
        return [c for c in self.ex.store.contracts() if c["provider"] == self.provider]

    def submit_offer(self, node: str, reserve: float, first_slot: int, last_slot: int) -> int:
        return self.ex.submit_offer(self.provider, node, reserve, first_slot, last_slot)


class ApiAccess:
    """The user whose token ``client`` (a :class:`marketsched.platform.client.Client` on the exchange's
    API) carries."""

    def __init__(self, client):
        self.client = client

    def slot(self) -> int:
        return int(self.client.get("/api/market")["slot"])

    def history(self, limit: int) -> list[dict]:
        rows = self.client.get(f"/api/market/history?limit={min(limit, MAX_PAGE)}")
        for r in rows:  # JSON object keys are strings: the CPU classes are whole numbers
            r["classes"] = {int(k): v for k, v in r["classes"].items()}
        return rows

    def requests(self) -> list[dict]:
        return self._all("/api/orders", "")

    def paying_contracts(self) -> list[dict]:
        return self._all("/api/contracts", ",".join(PAYING_CONTRACT_STATES))

    def _all(self, path: str, states: str) -> list[dict]:
        """Every page of a list, oldest first."""
        out: list[dict] = []
        before = ""
        while True:
            page = self.client.get(f"{path}?limit={MAX_PAGE}" + (f"&state={states}" if states else "") + before)
            out = page + out
            if len(page) < MAX_PAGE or page[0]["id"] <= 1:
                return out
            before = f"&before={page[0]['id']}"

    def submit_request(self, value: float, cpu: int, mem: int, first_slot: int, last_slot: int, command: str) -> int:
        return int(self.client.post("/api/requests", {"value": value, "cpu": cpu, "mem": mem, "first_slot": first_slot,
                                                      "last_slot": last_slot, "command": command})["id"])


class ProviderApiAccess(ApiAccess):
    """The provider whose token ``client`` carries, over the exchange's HTTP API."""

    def nodes(self) -> list[dict]:
        return [n for n in self.client.get("/api/nodes") if n["left_t"] is None]

    def open_offers(self) -> list[dict]:
        return self._all("/api/orders", "open")

    def contracts(self) -> list[dict]:
        return self._all("/api/contracts", "")

    def submit_offer(self, node: str, reserve: float, first_slot: int, last_slot: int) -> int:
        return int(self.client.post("/api/offers", {"node": node, "reserve": reserve, "first_slot": first_slot,
                                                    "last_slot": last_slot})["id"])
