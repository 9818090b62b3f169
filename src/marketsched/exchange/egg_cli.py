"""``marketsched exchange egg ...``: Egg mode's commands (:mod:`.egg`).

* ``prices``: a provider's price agent over the HTTP API with its token: the library's static,
  capped or load-aware pricing (:mod:`marketsched.mechanisms.online.egg.providers`) computes the
  wish from the provider's capacity and its open contracts, the library's projection makes it
  admissible (definition 6), and the table is posted; once, or every ``--every`` seconds.
* ``bid``: a user's bid over the API (a value and a deadline).
* ``status``: on the exchange's host: every provider's reliability and record, the contracts by
  state and escrow and the escrow held, the books and the replay of the events through the library.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import click

from marketsched.platform.client import server_check_options

AGENTS = ("static", "capped", "load")


def agent_table(info: dict, me: str, agent: str, capacity: int, open_contracts: list[dict], rate: float = 1.0,
                fee: float = 0.1, kappa: float = 4.0) -> list:
    """Provider ``me``'s next table, flat, from the market as ``GET /api/egg/market`` shows it
    (``info``): the library's pricing ``agent`` (static: ``rate x (run-time bucket's upper edge in
    hours + fee)``; capped: the same, not offered where a job of the bucket's size no longer fits
    its ``capacity`` CPUs beside its open contracts by EDF's test; load: capped, times ``1 + kappa
    u^2``) projected on the admissible set. A contract's estimated work is ``tau* - award``
    (the auctioneer's ``tau* >= a + r``). Steps: rebuild the provider's table in a one-provider
    book at the market's time; fill a library provider agent with the open contracts; its wish;
    the library's projection (a first table: only rule 1's repair, as the exchange takes it)."""
    import numpy as np

    from marketsched.mechanisms.online.egg import PriceBook
    from marketsched.mechanisms.online.egg.providers import LoadAwarePricing, ProviderAgent, StaticPricing

    from .egg import table_json, table_of

    if agent not in AGENTS:
        raise ValueError(f"price agent must be one of {', '.join(AGENTS)}, got {agent!r}")
    cfg, slot, now = info["settings"], info["slot_seconds"], info["t"]
    rows = {p["provider"]: p for p in info["providers"]}
    if me not in rows:
        raise ValueError(f"provider {me!r} is not in the exchange's Egg market")
    if rows[me].get("left_t") is not None:
        raise ValueError(f"provider {me!r} has left the exchange: its table is withdrawn")
    shape = (*[len(e) - 1 for e in cfg["edges"]], cfg["horizon_slots"])
    posted = rows[me]["posted"]
    current = table_of(rows[me]["prices"], shape) if posted else np.zeros(shape)
    book = PriceBook(1, cfg["edges"], slot, cfg["patience_slots"] * slot, cfg["horizon_slots"], start=now,
                     prices=current[None])
    pricing = (StaticPricing(rate, fee) if agent == "static"
               else LoadAwarePricing(rate, fee, kappa=0.0 if agent == "capped" else kappa))
    provider = ProviderAgent(max(1, int(capacity)), pricing=pricing)
    provider.reset(0)
    for c in open_contracts:
        provider.enqueue(int(c["id"]), float(c["tau"]), float(c["tau"]) - float(c["award_t"]))
    wish = pricing.wish(provider, SimpleNamespace(book=book), now)  # type: ignore[arg-type]  # reads .book only
    return np.asarray(table_json(book.project(0, wish, now)), dtype=object).reshape(-1).tolist()


@click.group("egg")
def egg_group() -> None:
    """Egg mode (Kang & Parkes 2007): price tables, bids, status."""


def _client(url, token, data_dir, server_cert):
    from marketsched.platform.client import Client

    return Client(url, token, check_server=True, server_dir=data_dir, server_cert=server_cert)


API = [click.option("--url", envvar="MARKETSCHED_EXCHANGE_URL", default="http://127.0.0.1:8766", show_default=True,
                    help="The exchange's API [$MARKETSCHED_EXCHANGE_URL]."),
       click.option("--token", envvar="MARKETSCHED_TOKEN", required=True, help="Your token [$MARKETSCHED_TOKEN]."),
       click.option("--data", "data_dir", envvar="MARKETSCHED_EXCHANGE_DATA", default=None,
                    type=click.Path(file_okay=False, path_type=Path),
                    help="The exchange's data folder, on this host [$MARKETSCHED_EXCHANGE_DATA]."),
       server_check_options]


def api_options(fn):
    for opt in reversed(API):
        fn = opt(fn)
    return fn


@egg_group.command("prices")
@api_options
@click.option("--agent", type=click.Choice(AGENTS), default="static", show_default=True,
              help="The library's pricing: static per-unit, capped (not offered when full) or load-aware.")
@click.option("--rate", default=1.0, show_default=True, type=click.FloatRange(min=0), help="Price per run-time hour.")
@click.option("--fee", default=0.1, show_default=True, type=click.FloatRange(min=0), help="Fee, in run-time hours.")
@click.option("--kappa", default=4.0, show_default=True, type=click.FloatRange(min=0), help="Load-aware: 1 + kappa u^2.")
@click.option("--every", default=None, type=click.FloatRange(min=0.05),
              help="Post again every this many seconds (default: once).")
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
def prices_cmd(url, token, data_dir, server_cert, agent, rate, fee, kappa, every, duration):
    """A provider's price agent: post the library agent's admissible table with your token."""
    from marketsched.platform.client import ClientError

    client = _client(url, token, data_dir, server_cert)
    end = None if duration is None else time.monotonic() + duration
    try:
        me = client.get("/api/me")["name"]
        while True:
            info = client.get("/api/egg/market")
            capacity = sum(n["cpu"] for n in client.get("/api/nodes") if n.get("left_t") is None)
            mine = [c for c in client.get("/api/egg/contracts") if c["state"] in ("pending", "starting", "running")]
            try:
                table = agent_table(info, me, agent, capacity, mine, rate, fee, kappa)
            except ValueError as exc:
                raise click.ClickException(str(exc)) from None
            got = client.post("/api/egg/prices", {"prices": table})
            click.echo(f"{me}: {agent} table posted at {got['t']:.3f} (slot {got['base_slot']})")
            if every is None or (end is not None and time.monotonic() >= end):
                break
            time.sleep(every)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


@egg_group.command("bid")
@api_options
@click.option("--description", required=True, help="One number per resource axis, comma-separated (default "
                                                    "geometry: the run time in seconds).")
@click.option("--value", required=True, type=float, help="What the job is worth if done by the deadline.")
@click.option("--deadline", required=True, type=float, help="Seconds from now.")
@click.option("--min-reliability", default=0.0, show_default=True, type=click.FloatRange(0, 1))
@click.option("--cpu", default=1, show_default=True, type=int)
@click.option("--mem", default=0, show_default=True, type=int)
@click.option("--command", "command", required=True, help="Shell command the provider runs.")
def bid_cmd(url, token, data_dir, server_cert, description, value, deadline, min_reliability, cpu, mem, command):
    """A user's Egg bid: the exchange's auctioneer answers the provider, tau* and the price."""
    from marketsched.platform.client import ClientError

    try:
        desc = [float(x) for x in description.split(",")]
    except ValueError:
        raise click.ClickException(f"--description must be numbers separated by commas, got {description!r}") from None
    try:
        got = _client(url, token, data_dir, server_cert).post("/api/egg/bids", {
            "description": desc, "value": value, "deadline": deadline, "min_reliability": min_reliability,
            "cpu": cpu, "mem": mem, "command": command})
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(got))


@egg_group.command("status")
@click.argument("data", type=click.Path(file_okay=False, path_type=Path))
def status_cmd(data):
    """Providers' reliability and records, contracts by state and escrow, escrow held, books, replay (JSON)."""
    from .cli_open import click_errors, open_exchange
    from .egg import recorded, reliability, replay
    from .egg_books import summary

    ex = open_exchange(data)
    rel = click_errors(reliability, ex.egg, ex.clock())
    out = {"t": ex.clock(), "providers": [{k: p[k] for k in ("provider", "reliability", "completed", "settled")}
                                          for p in rel],
           **summary(ex.store), "books": ex.store.check_books(),
           "replay_equal": replay(ex.store) == recorded(ex.store)}
    click.echo(json.dumps(out, indent=1))
