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
* :class:`OfferAgent` (offer generation): keeps each node of its provider offered over a
  rolling horizon. The reserve price is the node's cost times ``markup``. When the last
  offer of a node ends within ``renew`` slots, the agent offers the next ``horizon`` slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .core import Exchange


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
class OfferAgent:
    """A provider's offer agent (see the module docstring); ``costs``: node name -> cost per
    CPU unit per slot."""

    provider: str
    costs: dict[str, float]
    markup: float = 1.0
    horizon: int = 20
    renew: int = 3

    def __post_init__(self):
        if self.markup < 0 or self.renew < 0 or self.horizon <= self.renew:
            raise ValueError(f"agent fields: markup >= 0, renew >= 0, horizon > renew; got {self.markup}, "
                             f"{self.renew}, {self.horizon}")

    def act(self, ex: Exchange) -> list[int]:
        """Offer the next window of every node whose offers end soon; returns the new offer ids."""
        now = ex.slot()
        new = []
        for name, cost in sorted(self.costs.items()):
            node_id = ex.store.node_id(self.provider, name)
            ends = [o["last_slot"] for o in ex.store.orders("offer", "open", node_id=node_id)]
            end = max(ends, default=now)
            if end - now <= self.renew:
                new.append(ex.submit_offer(self.provider, name, cost * self.markup, max(end, now) + 1,
                                           now + self.horizon))
        return new


def agents_from_config(config: dict, now_slot: int) -> list:
    """Agents from a JSON-like ``config``: ``{"users": [{"user", "shade", "lead", "jobs":
    [{"value", "cpu", "mem", "duration", "release", "deadline", "command"}]}], "providers":
    [{"provider", "costs": {node: cost}, "markup", "horizon", "renew"}]}``. A job's
    ``release`` and ``deadline`` count slots from ``now_slot``. ValueError naming what is wrong."""
    agents: list = []
    try:
        for p in config.get("providers", []):
            agents.append(OfferAgent(p["provider"], {str(k): float(v) for k, v in p["costs"].items()},
                                     float(p.get("markup", 1.0)), int(p.get("horizon", 20)), int(p.get("renew", 3))))
        for u in config.get("users", []):
            jobs = [JobNeed(float(j["value"]), int(j["cpu"]), int(j.get("mem", 0)), int(j["duration"]),
                            now_slot + int(j["release"]), now_slot + int(j["deadline"]), str(j.get("command", "true")))
                    for j in u["jobs"]]
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
        raise ValueError("simulate needs an exchange on a fake clock (marketsched.live.clock.FakeClock)")
    while clock() < until:
        for agent in agents:
            agent.act(ex)
        ex.tick()
        clock.advance(step)
    ex.tick()
