"""Agents of the intelligent tools layer (Stößer 2009, section 2.3): a bidding agent for users
and an offer agent for providers.

Both act through an :class:`~marketsched.exchange.core.Exchange` only (its orders and its
database), so the same agent runs live (an exchange on the wall clock) and in simulation (a
fake clock, :func:`simulate`).

* :class:`BiddingAgent` (bid generation): each of the user's jobs needs ``cpu`` and ``mem``
  for ``duration`` consecutive slots, no earlier than ``release`` and ending by ``deadline``.
  The agent requests the earliest window that starts at least ``lead`` slots after the
  current slot, reporting ``shade`` times the job's true value. If the request expires
  unfilled, it asks again for a later window. This is the load shifting the thesis welcomes
  (section 3.4.2). It gives up once no window fits before the deadline.
* :class:`BudgetAgent` (bid generation from market information, with a budget): the same
  jobs, but each bid is informed by the recent clearing prices of the job's CPU class and
  capped by the job's value and by what is left of the user's budget (its rule below). It
  reaches the exchange through :mod:`.access`, in process or over the HTTP API.
* :class:`OfferAgent` (offer generation): keeps each node of its provider offered over a
  rolling horizon. When the last offer of a node ends within ``renew`` slots, the agent offers
  the next ``horizon`` slots. The reserve price is the node's cost times ``markup``, raised
  with the provider's load (its rule below). It reaches the exchange through :mod:`.access`,
  in process or over the HTTP API.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .access import LocalAccess, LocalProviderAccess
from .core import Exchange
from .store import MICRO, commitment, to_micro


@dataclass(frozen=True)
class JobNeed:
    """A user's job: true value per CPU unit per slot, resources, and when it may run."""

    value: float
    cpu: int
    mem: int
    duration: int
    release: int
    deadline: int
    command: str = "true"

    def __post_init__(self):
        if self.duration < 1:
            raise ValueError(f"job field 'duration' must be >= 1 slot, got {self.duration}")
        if self.deadline < self.release + self.duration - 1:
            raise ValueError(f"job field 'deadline' ({self.deadline}) leaves no room for {self.duration} slots "
                             f"from release {self.release}")


@dataclass
class BiddingAgent:
    """A user's bidding agent (see the module docstring)."""

    user: str
    jobs: list[JobNeed]
    shade: float = 1.0
    lead: int = 2
    requests: dict[int, list[int]] = field(default_factory=dict)  # job index -> its request ids
    given_up: set[int] = field(default_factory=set)

    def __post_init__(self):
        if not (0 < self.shade <= 1):
            raise ValueError(f"agent field 'shade' must be in (0, 1] (a share of the true value), got {self.shade}")

    def act(self, ex: Exchange) -> list[int]:
        """Submit what is due now; returns the new request ids."""
        states = {o["id"]: o["state"] for o in ex.store.orders("request")} if self.requests else {}
        new = []
        for i, job in enumerate(self.jobs):
            mine = self.requests.get(i, [])
            if i in self.given_up or any(states.get(r) in ("open", "filled") for r in mine):
                continue
            first = max(job.release, ex.slot() + self.lead)
            if first + job.duration - 1 > job.deadline:
                self.given_up.add(i)
                continue
            rid = ex.submit_request(self.user, self.shade * job.value, job.cpu, job.mem, first,
                                    first + job.duration - 1, job.command)
            self.requests.setdefault(i, []).append(rid)
            new.append(rid)
        return new


@dataclass
class BudgetAgent:
    """A user's bidding agent with a budget that bids from market information.

    Stößer (2009, section 2.3) gives the bidding agent the user's valuation and the market
    information to generate bids; it states no bidding rule, so the rule is this module's
    decision. For a job of ``cpu`` CPU units, the reference price is the mean clearing price
    of that CPU class over the periods among the last ``window`` in which the class traded
    (else the mean price of those periods over all classes; with no trade at all, no
    reference). The bid per CPU unit per slot is the least of

    * the job's value (the agent never bids above it),
    * the reference price times ``1 + margin * tries`` (``tries``: this request and the job's
      earlier ones that expired unfilled, so a job that keeps losing bids higher), and
    * what the budget still allows for the job's window: ``budget`` less the user's
      commitments on the exchange (the bids of its open requests times their CPU slots, and
      the prices of its contracts that are not failed or lapsed), divided by the job's CPU
      slots, rounded down to a micro-unit.

    With no reference price the agent bids the value (within the budget). A job whose bid
    would be zero waits for the budget to free up (a lost request's commitment ends when it
    expires). Windows as :class:`BiddingAgent`'s. The commitments are read from the exchange,
    not kept in memory: the budget holds across the agent's restarts, for all of the user's
    orders. ``act`` takes an :class:`~.core.Exchange` (in process) or an :mod:`.access` object
    (e.g. :class:`~.access.ApiAccess`, over the API)."""

    user: str
    jobs: list[JobNeed]
    budget: float
    margin: float = 0.1
    window: int = 5
    lead: int = 2
    requests: dict[int, list[int]] = field(default_factory=dict)  # job index -> its request ids
    given_up: set[int] = field(default_factory=set)
    bids: list[tuple[int, int, float, float | None]] = field(default_factory=list)  # (slot, job, bid, reference)

    def __post_init__(self):
        if not (math.isfinite(self.budget) and self.budget >= 0):
            raise ValueError(f"agent field 'budget' must be a number >= 0 (currency units), got {self.budget!r}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"agent field 'margin' must be a number >= 0, got {self.margin!r}")
        if self.window < 1:
            raise ValueError(f"agent field 'window' must be >= 1 period, got {self.window!r}")

    def reference(self, history: list[dict], cpu: int) -> float | None:
        """The reference price of CPU class ``cpu`` from ``market_info`` rows (see the class)."""
        recent = history[-self.window:]
        prices = [r["classes"][cpu]["price"] for r in recent if cpu in r["classes"]]
        if not prices:
            prices = [r["price"] for r in recent if r["price"] is not None]
        return sum(prices) / len(prices) if prices else None

    def committed(self, market) -> int:
        """The user's commitments on the exchange, in micro-units (see the class)."""
        total = sum(commitment(o["value"], o["cpu"], o["first_slot"], o["last_slot"])
                    for o in market.requests() if o["state"] == "open")
        return total + sum(to_micro(c["user_price"]) for c in market.paying_contracts())

    def act(self, market) -> list[int]:
        """Submit what is due now; returns the new request ids."""
        if isinstance(market, Exchange):
            market = LocalAccess(market, self.user)
        states = {o["id"]: o["state"] for o in market.requests()}
        now = market.slot()
        history = None
        left = to_micro(self.budget) - self.committed(market)
        new = []
        for i, job in enumerate(self.jobs):
            mine = self.requests.get(i, [])
            if i in self.given_up or any(states.get(r) in ("open", "filled") for r in mine):
                continue
            first = max(job.release, now + self.lead)
            if first + job.duration - 1 > job.deadline:
                self.given_up.add(i)
                continue
            if history is None:
                history = market.history(self.window)
            ref = self.reference(history, job.cpu)
            slots = job.cpu * job.duration
            bid = job.value if ref is None else min(job.value, ref * (1 + self.margin * (len(mine) + 1)))
            bid = math.floor(min(bid, left / MICRO / slots) * MICRO) / MICRO
            if bid <= 0 or commitment(bid, job.cpu, first, first + job.duration - 1) > left:
                continue  # nothing left in the budget for this job now
            rid = market.submit_request(bid, job.cpu, job.mem, first, first + job.duration - 1, job.command)
            left -= commitment(bid, job.cpu, first, first + job.duration - 1)
            self.requests.setdefault(i, []).append(rid)
            self.bids.append((now, i, bid, ref))
            new.append(rid)
        return new


@dataclass
class OfferAgent:
    """A provider's offer agent; ``costs``: node name -> cost per CPU unit per slot.

    Stößer (2009, section 2.3) has the offer generation derive offers from the provider's
    supply and business model while it "continuously observes the state of the market"; it
    states no pricing rule, so this one is the module's decision. The reserve price of a
    node's next offer is

        cost * markup * (1 + load_weight * load)

    where ``load`` is the provider's load when the agent offers: the share of the CPU slots of
    its nodes in ``costs`` (those that have not left) over the next ``horizon`` slots that its
    contracts (in any state: sold capacity is not resold) already take. An idle provider asks
    its cost times markup, a fully booked one ``1 + load_weight`` times that; with
    ``load_weight`` 0 the load is ignored. ``offers`` records ``(slot, node, reserve, load)``.
    ``act`` takes an :class:`~.core.Exchange` (in process) or an :mod:`.access` provider object
    (e.g. :class:`~.access.ProviderApiAccess`, over the API)."""

    provider: str
    costs: dict[str, float]
    markup: float = 1.0
    horizon: int = 20
    renew: int = 3
    load_weight: float = 0.0
    offers: list[tuple[int, str, float, float]] = field(default_factory=list)

    def __post_init__(self):
        if self.markup < 0 or self.renew < 0 or self.horizon <= self.renew:
            raise ValueError(f"agent fields: markup >= 0, renew >= 0, horizon > renew; got {self.markup}, "
                             f"{self.renew}, {self.horizon}")
        if not (math.isfinite(self.load_weight) and self.load_weight >= 0):
            raise ValueError(f"agent field 'load_weight' must be a number >= 0, got {self.load_weight!r}")

    def load(self, market, nodes: list[dict], now: int) -> float:
        """The provider's load over slots ``now + 1 .. now + horizon`` (see the class)."""
        first, last = now + 1, now + self.horizon
        ids = {n["id"] for n in nodes}
        capacity = sum(n["cpu"] for n in nodes) * self.horizon
        sold = sum(c["cpu"] * max(0, min(c["last_slot"], last) - max(c["first_slot"], first) + 1)
                   for c in market.contracts() if c["node_id"] in ids)
        return min(1.0, sold / capacity) if capacity else 0.0

    def act(self, market) -> list[int]:
        """Offer the next window of every node whose offers end soon; returns the new offer ids."""
        if isinstance(market, Exchange):
            market = LocalProviderAccess(market, self.provider)
        now = market.slot()
        nodes = [n for n in market.nodes() if n["name"] in self.costs]
        by_name = {n["name"]: n for n in nodes}
        ends: dict[int, int] = {}
        for o in market.open_offers():
            ends[o["node_id"]] = max(ends.get(o["node_id"], now), o["last_slot"])
        load = None
        new = []
        for name, cost in sorted(self.costs.items()):
            if name not in by_name:
                continue  # the node left (or never joined): nothing to offer
            end = ends.get(by_name[name]["id"], now)
            if end - now <= self.renew:
                if load is None:
                    load = self.load(market, nodes, now)
                reserve = cost * self.markup * (1 + self.load_weight * load)
                new.append(market.submit_offer(name, reserve, max(end, now) + 1, now + self.horizon))
                self.offers.append((now, name, reserve, load))
        return new


def agents_from_config(config: dict, now_slot: int) -> list:
    """Agents from a JSON-like ``config``: ``{"users": [{"user", "shade", "lead", "jobs":
    [{"value", "cpu", "mem", "duration", "release", "deadline", "command"}]}], "providers":
    [{"provider", "costs": {node: cost}, "markup", "horizon", "renew", "load_weight"}]}``. A job's
    ``release`` and ``deadline`` count slots from ``now_slot``. A user with a ``budget`` (and
    optionally ``margin``, ``window``) gets a :class:`BudgetAgent`, else a :class:`BiddingAgent`.
    ValueError naming what is wrong."""
    agents: list = []
    try:
        for p in config.get("providers", []):
            agents.append(OfferAgent(p["provider"], {str(k): float(v) for k, v in p["costs"].items()},
                                     float(p.get("markup", 1.0)), int(p.get("horizon", 20)), int(p.get("renew", 3)),
                                     float(p.get("load_weight", 0.0))))
        for u in config.get("users", []):
            jobs = [JobNeed(float(j["value"]), int(j["cpu"]), int(j.get("mem", 0)), int(j["duration"]),
                            now_slot + int(j["release"]), now_slot + int(j["deadline"]), str(j.get("command", "true")))
                    for j in u["jobs"]]
            if "budget" in u:
                agents.append(BudgetAgent(u["user"], jobs, float(u["budget"]), float(u.get("margin", 0.1)),
                                          int(u.get("window", 5)), int(u.get("lead", 2))))
            else:
                agents.append(BiddingAgent(u["user"], jobs, float(u.get("shade", 1.0)), int(u.get("lead", 2))))
    except KeyError as exc:
        raise ValueError(f"agents config: missing field {exc}") from None
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"agents config: {exc}") from None
    return agents


def simulate(ex: Exchange, agents, until: float, step: float) -> None:
    """Run agents and exchange on the exchange's fake clock (it must have ``advance``) from now
    to ``until``: at every step each agent acts, then the exchange ticks."""
    clock = ex.clock
    if not hasattr(clock, "advance"):
        raise ValueError("simulate needs an exchange on a fake clock (marketsched.platform.clock.FakeClock)")
    while clock() < until:
        for agent in agents:
            agent.act(ex)
        ex.tick()
        clock.advance(step)
    ex.tick()
