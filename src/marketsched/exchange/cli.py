"""``marketsched exchange ...``: set up, feed, run and inspect a grid exchange.

Every command works on the exchange's data folder (``DATA/exchange.db``; local providers' jobs
under ``DATA/providers/NAME``). Orders and participants are written straight into the
database, which the running exchange (``marketsched exchange run DATA``) reads at every
clearing; SQLite's write-ahead log lets both work at once.
"""

from __future__ import annotations

import functools
import json
import signal
import sqlite3
import time
import urllib.parse
from pathlib import Path

import click

from marketsched.platform.client import party_limit_options, server_check_options, tls_options

from .cli_open import click_errors, open_exchange, open_store
from .egg_cli import egg_group
from .orders import MECHANISMS, PROVIDER_KINDS
from .store import MICRO, ExchangeStore

# the exchange's core (NumPy, the mechanisms) is imported by the commands that use it, so that
# `marketsched --help` stays light

DATA = click.argument("data", type=click.Path(file_okay=False, path_type=Path))
# a party's way to the API (``bid``, ``provider run``)
API_URL = click.option("--url", envvar="MARKETSCHED_EXCHANGE_URL", default="http://127.0.0.1:8766", show_default=True,
                       help="The exchange's API [$MARKETSCHED_EXCHANGE_URL].")
API_DATA = click.option("--data", "data_dir", envvar="MARKETSCHED_EXCHANGE_DATA", default=None,
                        type=click.Path(file_okay=False, path_type=Path),
                        help="The exchange's data folder, on this host: over plain HTTP the token goes only to the "
                             "server its server.id names [$MARKETSCHED_EXCHANGE_DATA].")


class _Group(click.Group):
    """The exchange's commands: a database error (a lock held longer than SQLite's 30 s busy
    timeout, a damaged file) is an error message, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except sqlite3.Error as exc:
            raise click.ClickException(f"the exchange's database: {exc} (try again; if it persists, check "
                                       "the file and the processes using it)") from None


@click.group("exchange", cls=_Group)
def exchange() -> None:
    """A live grid exchange: providers, requests and offers, periodic clearing (Stößer 2009)."""


@exchange.command("init")
@DATA
@click.option("--slot-seconds", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Length of a timeslot.")
@click.option("--period-seconds", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Time between clearings.")
@click.option("--mechanism", default="critical-value", show_default=True, type=click.Choice(MECHANISMS),
              help="GREEDEX with critical-value or k-pricing, the randomized pay-as-bid heuristic, the distributed "
                   "randomized mechanism (each provider computes randomized runs, best run enforced), the exact "
                   "MIP with k-pricing (small books; larger ones fall back to GREEDEX with k-pricing), or Egg (Kang & "
                   "Parkes 2007: no clearing; a per-bid auctioneer over the providers' price tables, escrow until "
                   "tau*; see `exchange egg`).")
@click.option("--k", default=0.5, show_default=True, type=click.FloatRange(0, 1),
              help="k-pricing: the user's share of each local surplus.")
@click.option("--alpha", default=10.0, show_default=True, type=click.FloatRange(min=1),
              help="pay-as-bid, randomized-distributed: exponent of the randomized draw (eq. 4.1).")
@click.option("--penalty", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="A failed contract's penalty, times its price.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the randomized mechanism.")
@click.option("--deposits", is_flag=True,
              help="Users pay from deposits (marketsched exchange deposit): a request its user's available "
                   "balance does not cover is refused. Without it, users trade on credit.")
@click.option("--egg-patience", default=None, type=click.IntRange(1, 1000),
              help="Egg: the patience bound Delta in slots (default 24); price tables have 2 Delta + 2 columns.")
@click.option("--answer-seconds", default=0.0, show_default=True, type=click.FloatRange(0, 3600),
              help="randomized-distributed: the providers' agents (exchange provider run) answer over the API within "
                   "this many seconds of a clearing's asks; 0: the providers are answered in the exchange's process.")
def init_cmd(data, slot_seconds, period_seconds, mechanism, k, alpha, penalty, seed, deposits, egg_patience,
             answer_seconds):
    """Create an exchange in DATA (its clock starts now)."""
    from .core import create_exchange

    if egg_patience is not None and mechanism != "egg":
        raise click.ClickException("--egg-patience is for --mechanism egg")
    store = open_store(data)

    def create():
        from .egg import default_settings

        egg = default_settings(egg_patience) if egg_patience is not None else None
        create_exchange(store, slot_seconds=slot_seconds, period_seconds=period_seconds, mechanism=mechanism, k=k,
                        alpha=alpha, penalty=penalty, seed=seed, epoch=time.time(), deposits=deposits, egg=egg,
                        answer_seconds=answer_seconds)

    click_errors(create)
    click.echo(f"exchange at {store.path}: {mechanism}, slots of {slot_seconds:g} s, "
               + ("an award at each bid (no clearing)" if mechanism == "egg" else f"clearing every {period_seconds:g} s"))


@exchange.command("join")
@DATA
@click.argument("provider")
@click.option("--kind", default="local", show_default=True, type=click.Choice(PROVIDER_KINDS),
              help="local: nodes on this machine's CPUs; slurm: contracts run as batch jobs in a Slurm partition; agent: the "
                   "provider's own agent (exchange provider run) runs its contracts on its machine.")
@click.option("--partition", default=None, help="Slurm partition of a slurm provider (default: Slurm's default).")
def join_cmd(data, provider, kind, partition):
    """A provider joins the exchange."""
    click_errors(lambda: open_exchange(data).join(provider, kind, partition, checked=True))
    click.echo(f"provider {provider} joined")


@exchange.command("node")
@DATA
@click.argument("provider")
@click.argument("name")
@click.option("--cpu", required=True, type=int,
              help="CPU units the node sells per slot: at most one per CPU backing it (local: the CPUs of --cpus; "
                   "slurm: the partition's).")
@click.option("--mem", required=True, type=int, help="Memory units the node sells per slot.")
@click.option("--cpus", default=None,
              help="CPUs of this machine backing the node, e.g. 0,1 (local providers; default: all of them now).")
def node_cmd(data, provider, name, cpu, mem, cpus):
    """Add a node to a provider."""
    try:
        cpu_list = [int(c) for c in cpus.split(",")] if cpus else None
    except ValueError:
        raise click.BadParameter(f"a comma-separated list of CPU numbers, got {cpus!r}", param_hint="--cpus") from None
    ex = open_exchange(data)
    node_id = click_errors(lambda: ex.add_node(provider, name, cpu, mem, cpu_list, checked=True))
    click.echo(f"node {node_id}: {provider}/{name}")


@exchange.command("deposit")
@DATA
@click.argument("user")
@click.argument("amount", type=float)
def deposit_cmd(data, user, amount):
    """Deposit AMOUNT currency units into USER's account (an exchange made with --deposits takes
    a user's requests only as far as its available balance covers them)."""
    ex = open_exchange(data)
    click_errors(ex.deposit, user, amount)
    money = ex.store.available(user)
    click.echo(f"{user}: balance {money['balance'] / MICRO:.6f}, available {money['available'] / MICRO:.6f}")


@exchange.command("request")
@DATA
@click.argument("user")
@click.option("--value", required=True, type=float, help="Most you pay per CPU unit per slot.")
@click.option("--cpu", required=True, type=int, help="CPU units needed in every slot.")
@click.option("--mem", default=0, show_default=True, type=int, help="Memory units needed in every slot.")
@click.option("--first-slot", required=True, type=int, help="First slot (after the current one; see status).")
@click.option("--last-slot", required=True, type=int, help="Last slot: the job runs in every slot between.")
@click.option("--command", "command", required=True, help="Shell command the provider runs.")
def request_cmd(data, user, value, cpu, mem, first_slot, last_slot, command):
    """A user's request (value, CPU, memory, window, command)."""
    oid = click_errors(open_exchange(data).submit_request, user, value, cpu, mem, first_slot, last_slot, command)
    click.echo(f"request {oid}")


@exchange.command("offer")
@DATA
@click.argument("provider")
@click.argument("node")
@click.option("--reserve", required=True, type=float, help="Reserve price per CPU unit per slot.")
@click.option("--first-slot", required=True, type=int)
@click.option("--last-slot", required=True, type=int)
def offer_cmd(data, provider, node, reserve, first_slot, last_slot):
    """A provider's offer of one of its nodes over a window of slots."""
    oid = click_errors(open_exchange(data).submit_offer, provider, node, reserve, first_slot, last_slot)
    click.echo(f"offer {oid}")


@exchange.command("cancel")
@DATA
@click.argument("owner")
@click.argument("order_id", type=int)
def cancel_cmd(data, owner, order_id):
    """Withdraw an open order (its owner: the user or the provider)."""
    click_errors(open_exchange(data).cancel, owner, order_id)
    click.echo(f"order {order_id} cancelled")


@exchange.command("run")
@DATA
@click.option("--containment", default="auto", show_default=True, type=click.Choice(["auto", "none"]),
              help="Jobs in cgroups where writable (auto) or in process groups only (none).")
@click.option("--poll", default=0.2, show_default=True, type=click.FloatRange(min=0.01), help="Seconds between steps.")
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
@click.option("--single-user/--multi-user", "single_user", default=None,
              help="Single-user: every contract job runs as the exchange's own account (one person, a demo; the "
                   "default when not root). Multi-user: each job runs as its user's Unix account (`exchange unix`), "
                   "and a user with none gets no job run; needs root (the default as root).")
@click.option("--service-user", default=None, metavar="ACCOUNT",
              help="Started as root: run the exchange (database, clearing, settlement) as this unprivileged account, "
                   "which must own DATA; a small privileged launcher keeps root to start and kill contract jobs as "
                   "their users' accounts (multi-user mode, local providers; see docs/exchange.md).")
def run_cmd(data, containment, poll, duration, single_user, service_user):
    """Run the exchange: clear every period, run contracts, settle them (Ctrl-C stops it;
    running jobs keep running and are re-attached by the next run)."""
    import os

    from .providers import provider_backends

    if single_user is False and os.geteuid() != 0:
        raise click.ClickException("--multi-user runs each contract job as its user's Unix account, which needs "
                                   "root: run the exchange as root, or use --single-user")
    launcher = None
    if service_user is not None:
        if single_user or containment != "auto":
            raise click.ClickException("--service-user needs multi-user mode and cgroups (no --single-user, "
                                       "--containment auto)")
        from .launcher import service_backends, start_launcher

        try:
            launcher = start_launcher(data, service_user)
        except (ValueError, RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        single_user = False
    try:
        ex = open_exchange(data, provider_backends(data, containment) if launcher is None
                           else service_backends(data, launcher))
        if launcher is not None:
            slurm = sorted(p["name"] for p in ex.store.providers() if p["kind"] == "slurm" and p["left_t"] is None)
            if slurm:
                raise click.ClickException(f"--service-user runs local providers only; Slurm provider(s) "
                                           f"{', '.join(slurm)} joined (run this exchange as root without it)")
    except BaseException:
        if launcher is not None:
            launcher.close()
        raise
    if launcher is not None:
        click.echo(f"exchange runs as {service_user} (uid {os.geteuid()}); contract jobs are started by the "
                   "privileged launcher (root)", err=True)
    ex.background = True  # clearings computed in a worker thread: windows are enforced meanwhile
    ex.single_user = single_user if single_user is not None else os.geteuid() != 0
    if ex.single_user:
        click.echo(f"single-user mode: every contract job runs as uid {os.geteuid()} (the exchange's account)", err=True)
        if os.geteuid() == 0:
            click.echo("WARNING: single-user mode as root: every contract job runs as root; map users to Unix "
                       "accounts (exchange unix) and drop --single-user (docs/exchange.md)", err=True)
    else:
        click.echo("multi-user mode: each contract job runs as its user's Unix account; a request of a user with "
                   "none is refused (exchange unix maps one)", err=True)
        accounts = ex.store.unix_accounts()
        owners = ex.store.rows("SELECT DISTINCT owner FROM ex_orders WHERE side = 'request' AND state = 'open'")
        unmapped = sorted({o for (o,) in owners} - set(accounts))
        if unmapped:
            click.echo(f"WARNING: open requests of users with no Unix account, whose contracts will lapse: "
                       f"{', '.join(unmapped)} (marketsched exchange unix DATA USER ACCOUNT)", err=True)
    # recorded for the API and the command line, which refuse requests that could never run
    ex.store.set_run_mode("single-user" if ex.single_user else "multi-user")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ex.recover()
    click.echo(f"exchange running at slot {ex.slot()} ({ex.settings['mechanism']})", err=True)
    end = None if duration is None else time.monotonic() + duration
    try:
        while not stop and (end is None or time.monotonic() < end):
            try:
                ex.tick()
            except (OSError, RuntimeError, sqlite3.OperationalError) as exc:  # e.g. Slurm or the disk, for a moment
                click.echo(f"exchange: this step failed, trying again: {exc}", err=True)  # each step commits whole
            time.sleep(poll)
    except KeyboardInterrupt:
        pass
    finally:
        ex.close()
        if launcher is not None:
            launcher.close()


@exchange.command("token")
@DATA
@click.argument("name")
@click.option("--user", "role", flag_value="user", help="A user's token (requests).")
@click.option("--provider", "role", flag_value="provider",
              help="A provider's token (offers, nodes; it may join with it through the API: POST /api/join).")
def token_cmd(data, name, role):
    """Issue a party's token for the HTTP API (printed once; its old one stops working)."""
    from .api import issue_token

    if role is None:
        raise click.UsageError("give --user or --provider")
    ex = open_exchange(data)
    click.echo(click_errors(issue_token, ex.store, role, name, ex.clock()))


@exchange.command("unix")
@DATA
@click.argument("user")
@click.argument("account")
def unix_cmd(data, user, account):
    """Run USER's contract jobs as Unix account ACCOUNT (when the exchange runs as root;
    docs/exchange.md). Once any user is mapped, a root exchange runs no unmapped user's job."""
    from marketsched.platform.executor import RunAs

    from .orders import check_name

    ex = open_exchange(data)
    click_errors(check_name, "user", "name", user)
    click_errors(RunAs.lookup, account)
    click_errors(ex.store.set_unix, user, account)
    click.echo(f"user {user!r}: contract jobs run as Unix account {account!r}")


@exchange.command("serve")
@DATA
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535))
@tls_options
@party_limit_options
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
def serve_cmd(data, host, port, tls_cert, tls_key, insecure_http, duration, party_limits):
    """Serve the HTTP API and the market information page (docs/exchange.md); the exchange
    itself runs separately (marketsched exchange run)."""
    from marketsched.platform.server import Limits

    from .api import ExchangeServer, ExchangeService

    ex = open_exchange(data)
    try:
        srv = ExchangeServer(ExchangeService(ex.store, ex.clock), host, port, tls_cert=tls_cert, tls_key=tls_key,
                             insecure_http=insecure_http, limits=Limits(**party_limits))
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    srv.serve_in_thread()
    click.echo(f"exchange API at {srv.url}", err=True)
    end = None if duration is None else time.monotonic() + duration
    try:
        while not stop and (end is None or time.monotonic() < end):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown()


@exchange.command("agents")
@DATA
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--step", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between the agents' turns.")
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
def agents_cmd(data, config, step, duration):
    """Run bidding and offer agents from a JSON file against the exchange (docs/exchange.md);
    the exchange itself runs separately (marketsched exchange run)."""
    from .agents import agents_from_config

    ex = open_exchange(data)
    try:
        spec = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{config}: not JSON ({exc})") from None
    agents = click_errors(agents_from_config, spec, ex.slot())
    end = None if duration is None else time.monotonic() + duration
    while True:
        for agent in agents:
            click_errors(agent.act, ex)
        if end is not None and time.monotonic() >= end:
            break
        time.sleep(step)
    click.echo(f"{len(agents)} agents, {len(ex.store.orders())} orders in the book's history")


@exchange.command("bid")
@click.argument("config", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@API_URL
@click.option("--token", envvar="MARKETSCHED_TOKEN", required=True,
              help="Your user's or provider's token [$MARKETSCHED_TOKEN].")
@API_DATA
@server_check_options
@click.option("--step", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between the agent's turns.")
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
def bid_cmd(config, url, token, data_dir, server_cert, step, duration):
    """Run your agent over the exchange's HTTP API (docs/exchange.md). With a user's token,
    the budget bidding agent: CONFIG is {"budget", "margin"?, "window"?, "lead"?, "jobs": [...]},
    jobs as for `exchange agents`. With a provider's token, the offer agent: CONFIG is
    {"costs": {node: cost}, "markup"?, "horizon"?, "renew"?, "load_weight"?}."""
    from marketsched.platform.client import Client, ClientError

    from .access import ApiAccess, ProviderApiAccess
    from .agents import agents_from_config

    try:
        spec = json.loads(config.read_text())
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{config}: not JSON ({exc})") from None
    client = Client(url, token, check_server=True, server_dir=data_dir, server_cert=server_cert)
    try:
        me = client.get("/api/me")
        if me["role"] == "user":
            if not isinstance(spec, dict) or "budget" not in spec:
                raise click.ClickException(f"{config}: a user's agent needs a JSON object with a 'budget'")
            market = ApiAccess(client)
            config_of = {"users": [{**spec, "user": me["name"]}]}
        else:
            if not isinstance(spec, dict) or not isinstance(spec.get("costs"), dict):
                raise click.ClickException(f"{config}: a provider's agent needs a JSON object with 'costs' "
                                           "({node: cost per CPU unit per slot})")
            market = ProviderApiAccess(client)
            config_of = {"providers": [{**spec, "provider": me["name"]}]}
        (agent,) = click_errors(agents_from_config, config_of, market.slot())
        end = None if duration is None else time.monotonic() + duration
        while True:
            click_errors(agent.act, market)
            if end is not None and time.monotonic() >= end:
                break
            time.sleep(step)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    if me["role"] == "user":
        click.echo(f"{len(agent.bids)} bids for {me['name']!r}; committed {agent.committed(market) / MICRO:.6f} "
                   f"of a budget of {agent.budget:g}")
    else:
        click.echo(f"{len(agent.offers)} offers for {me['name']!r}; last reserve "
                   + (f"{agent.offers[-1][2]:.6f} at load {agent.offers[-1][3]:.3f}" if agent.offers else "-"))


@exchange.command("status")
@DATA
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(data, as_json):
    """Current slot, open orders, contracts by state, balances (and a check of the books), and
    which nodes the last clearing sold below their registered CPU units, and why; on an Egg
    exchange, also its contracts by state and escrow and the escrow held (amount, count)."""
    from .info import lowered_capacity

    ex = open_exchange(data)
    store = ex.store
    states = dict(store.rows("SELECT state, COUNT(*) FROM ex_contracts GROUP BY state"))
    orders = dict(store.rows("SELECT side || ':' || state, COUNT(*) FROM ex_orders GROUP BY side, state"))
    for (_, side), got in store.retired().items():  # cancelled orders retired to a count
        orders[f"{side}:cancelled"] = orders.get(f"{side}:cancelled", 0) + got["orders"]
    books = store.check_books()
    balances = {k: v / MICRO for k, v in sorted(store.balances().items())}
    capacity = lowered_capacity(store)
    out = {"time": ex.clock(), "slot": ex.slot(), "orders": orders, "contracts": states, "balances": balances,
           "books": books, "capacity": capacity}
    if ex.settings["mechanism"] == "egg":
        from .egg_books import summary

        out["egg"] = summary(store)
    if as_json:
        click.echo(json.dumps(out, indent=1))
        return
    click.echo(f"time {ex.clock():.1f} s, slot {ex.slot()}")
    click.echo("orders: " + ", ".join(f"{k} {v}" for k, v in sorted(orders.items())))
    click.echo("contracts: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    if "egg" in out:
        egg, held = out["egg"], out["egg"]["escrow_held"]
        click.echo("Egg contracts (state/escrow): " + ", ".join(f"{k} {v}" for k, v in egg["contracts"].items()))
        click.echo(f"Egg escrow held: {held['amount']:.6f} in {held['count']} contracts")
    for acct, bal in balances.items():
        click.echo(f"  {acct:30s} {bal:16.6f}")
    click.echo(f"books balance; clearing account holds {books['clearing']} micro-units")
    if capacity is not None and capacity["nodes"]:
        click.echo(f"capacity lowered at the last clearing (period {capacity['period']}):")
        for n in capacity["nodes"]:
            click.echo(f"  {n['why']}")


@exchange.command("contracts")
@DATA
def contracts_cmd(data):
    """Every contract: parties, node, window, price, penalty, state."""
    store = open_exchange(data).store
    nodes = store.nodes()
    click.echo("id period user provider node slots price penalty state started note")
    for c in store.contracts():
        n = nodes[c["node_id"]]
        click.echo(f"{c['id']} {c['period']} {c['user']} {c['provider']} {n['name']} "
                   f"{c['first_slot']}-{c['last_slot']} {c['user_price'] / MICRO:.6f} {c['penalty'] / MICRO:.6f} "
                   f"{c['state']} {c['started_t'] if c['started_t'] is not None else '-'} {c['note']}")


@exchange.command("info")
@DATA
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def info_cmd(data, as_json):
    """Market information: volume, clearing price per CPU class, open interest, per period."""
    from .info import market_info

    rows = market_info(open_exchange(data).store)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo("period t requests offers contracts cpu_slots volume price open_interest")
    for r in rows:
        price = f"{r['price']:.4f}" if r["price"] is not None else "-"
        click.echo(f"{r['period']} {r['t']:.1f} {r['requests']} {r['offers']} {r['contracts']} {r['cpu_slots']} "
                   f"{r['volume']:.6f} {price} {r['open_interest']}")


@exchange.command("replay")
@DATA
def replay_cmd(data):
    """Re-clear the recorded session offline and compare its contracts with the recorded ones
    (Egg mode: every bid's choice and payment, re-derived from the events by the library)."""
    from .replay import contract_terms, replay_session

    ex = open_exchange(data)
    store = ex.store
    if ex.settings["mechanism"] == "egg":
        from .egg import recorded as egg_recorded
        from .egg import replay as egg_replay

        recorded, again = egg_recorded(store), egg_replay(store)
    else:
        recorded, again = contract_terms(store), replay_session(store)
    if recorded != again:
        diff = next((i for i, (a, b) in enumerate(zip(recorded, again)) if a != b), min(len(recorded), len(again)))
        raise click.ClickException(f"the replay differs from the record at contract {diff + 1} "
                                   f"({len(recorded)} recorded, {len(again)} replayed)")
    click.echo(f"replay: the same {len(recorded)} contracts over {len(store.periods())} periods")


# ---------------------------------------------------------------------------- a party's money
def _party_options(body):
    """The options of ``balance`` and ``statement``, the market's shape: ``--user NAME`` or
    ``--provider NAME`` (whose), and a party's way to the API (``--url``, ``--token``,
    ``--token-file``, ``--server-cert``). With a token the command asks the API as that party,
    which answers only for itself (DATA, if given, is the folder whose ``server.id`` a plain-HTTP
    server must match, as for ``bid``); without one it is the operator's, on DATA's database.
    The command gets ``whose`` (``(role, name)`` or None) and ``client`` (a Client, or None)."""

    @functools.wraps(body)
    def command(*args, data, user, provider, url, token, token_file, server_cert, **kwargs):
        from marketsched.platform.client import Client

        if user is not None and provider is not None:
            raise click.UsageError("give --user or --provider, not both")
        whose = ("user", user) if user is not None else ("provider", provider) if provider is not None else None
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise click.ClickException(f"cannot read the token file {token_file}: {exc.strerror}") from None
        if not token and data is None:
            raise click.UsageError("give DATA (the operator, on the exchange's database) or a party's token "
                                   "(--token, --token-file, $MARKETSCHED_TOKEN)")
        client = Client(url, token, check_server=True, server_dir=data, server_cert=server_cert) if token else None
        return body(*args, data=data, whose=whose, client=client, **kwargs)

    f = server_check_options(command)
    f = click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="File holding a party's token.")(f)
    f = click.option("--token", envvar="MARKETSCHED_TOKEN", default=None,
                     help="A party's token: ask the API as that party [$MARKETSCHED_TOKEN].")(f)
    f = click.option("--url", envvar="MARKETSCHED_EXCHANGE_URL", default="http://127.0.0.1:8766", show_default=True,
                     help="The exchange's API, with a token [$MARKETSCHED_EXCHANGE_URL].")(f)
    f = click.option("--provider", default=None, metavar="NAME", help="Provider NAME's (a party: only its own).")(f)
    f = click.option("--user", default=None, metavar="NAME", help="User NAME's (a party: only its own).")(f)
    return click.argument("data", required=False, type=click.Path(file_okay=False, path_type=Path))(f)


def _ask(client, path: str):
    from marketsched.platform.client import ClientError

    try:
        return client.get(path)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


def _whose_query(whose) -> str:
    return "" if whose is None else f"&{whose[0]}={urllib.parse.quote(whose[1])}"


def _account(store: ExchangeStore, data: Path, whose) -> str:
    """The ledger account of party ``whose`` (ClickException naming DATA if the exchange knows
    no such party: no account, token, order, nor, for a provider, joining)."""
    from .store import provider_account, user_account

    role, name = whose
    account = (user_account if role == "user" else provider_account)(name)
    side = "request" if role == "user" else "offer"
    if not (store.rows("SELECT 1 FROM accounts WHERE name = ?", (account,))
            or store.rows("SELECT 1 FROM ex_parties WHERE role = ? AND name = ?", (role, name))
            or store.rows("SELECT 1 FROM ex_orders WHERE side = ? AND owner = ? LIMIT 1", (side, name))
            or (role == "provider" and store.provider(name) is not None)):
        raise click.ClickException(f"the exchange at {data} has no {role} {name!r}")
    return account


@exchange.command("balance")
@_party_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def balance_cmd(data, whose, client, as_json):
    """A party's balance (a user's also what its open requests and contracts commit, and what is
    available). The operator on DATA: a party's with --user/--provider, else every account's."""
    from marketsched.platform.statement import echo_balance_rows, money

    if client is not None:
        me = _ask(client, "/api/me")
        if whose is not None and whose != (me["role"], me["name"]):
            raise click.ClickException(f"a party sees only its own balance; this token is {me['role']} "
                                       f"{me['name']!r}'s")
        whose = (me["role"], me["name"])
        b = (_ask(client, "/api/balance") if me["role"] == "user"
             else {"balance": _ask(client, "/api/statement?limit=1")["balance"]})
    else:
        store = open_exchange(data).store
        if whose is None:
            b = {"accounts": {k: v / MICRO for k, v in sorted(store.balances().items())}}
        else:
            account = _account(store, data, whose)
            b = ({k: v / MICRO for k, v in store.available(whose[1]).items()} if whose[0] == "user"
                 else {"balance": store.statement(account, 1)["balance"]})
    if whose is not None:
        b = {"role": whose[0], "name": whose[1], **b}
    if as_json:
        click.echo(json.dumps(b, indent=2))
    elif whose is None:
        echo_balance_rows([(k, v, "") for k, v in b["accounts"].items()])
    else:
        more = f" (committed {money(b['committed'])}, available {money(b['available'])})" if "committed" in b else ""
        click.echo(f"{whose[1]}: {money(b['balance'])}{more}")


@exchange.command("statement")
@_party_options
@click.option("--limit", default=200, type=click.IntRange(1, 1000), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def statement_cmd(data, whose, client, limit, as_json):
    """A party's ledger entries: deposits and payments in (+), charges and penalties out (-), each
    with its contract; then the balance. A party sees only its own; the operator on DATA names
    whose with --user or --provider."""
    from marketsched.platform.statement import echo_statement

    if client is not None:
        s = _ask(client, f"/api/statement?limit={limit}{_whose_query(whose)}")
    elif whose is None:
        raise click.UsageError("whose statement? give --user NAME or --provider NAME (or a party's --token)")
    else:
        store = open_exchange(data).store
        s = {"role": whose[0], "name": whose[1], **store.statement(_account(store, data, whose), limit)}
    if as_json:
        click.echo(json.dumps(s, indent=2))
    else:
        echo_statement(s, "contract")


# ---------------------------------------------------------------------------- the market's names
@exchange.group("user", cls=_Group)
def user_group() -> None:
    """Users, as the live market's `market user` commands: add one, renew its token."""


@user_group.command("add")
@DATA
@click.argument("name")
@click.option("--deposit", default=0.0, type=float, show_default=True, help="Initial deposit.")
@click.option("--unix", "unix", default=None, metavar="ACCOUNT",
              help="Run NAME's contract jobs as Unix account ACCOUNT (as `exchange unix`).")
def user_add_cmd(data, name, deposit, unix):
    """Create user NAME: its token for the HTTP API, printed on stdout (give it to them), with
    `exchange token --user`, `deposit` and `unix` in one. A user that has a token already is
    refused (renew it with `exchange user token`)."""
    from marketsched.platform.executor import RunAs

    from .api import issue_token
    from .orders import check_name

    ex = open_exchange(data)
    click_errors(check_name, "user", "name", name)
    if ex.store.rows("SELECT 1 FROM ex_parties WHERE role = 'user' AND name = ?", (name,)):
        raise click.ClickException(f"user {name!r} has a token already (a new one: marketsched exchange user token "
                                   f"{data} {name})")
    if unix is not None:
        click_errors(RunAs.lookup, unix)
    if deposit:
        click_errors(ex.deposit, name, deposit)
    token = click_errors(issue_token, ex.store, "user", name, ex.clock())
    if unix is not None:
        click_errors(ex.store.set_unix, name, unix)
    money = ex.store.available(name)["balance"] / MICRO
    click.echo(f"user {name} created with balance {money:g}" + (f", Unix account {unix}" if unix else ""), err=True)
    click.echo(token)


@user_group.command("token")
@DATA
@click.argument("name")
@click.pass_context
def user_token_cmd(ctx, data, name):
    """Issue user NAME a new token (as `exchange token --user`): printed once; the old one
    stops working."""
    ctx.invoke(token_cmd, data=data, name=name, role="user")


exchange.add_command(egg_group)  # Egg mode's commands (.egg_cli)


# ---------------------------------------------------------------------------- a provider's agent
@exchange.group("provider", cls=_Group)
def provider_group() -> None:
    """A provider's own processes (docs/exchange.md, "Provider agents")."""


@provider_group.command("run")
@API_URL
@click.option("--token", envvar="MARKETSCHED_TOKEN", default=None, help="The provider's token [$MARKETSCHED_TOKEN].")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File holding the provider's token.")
@API_DATA
@server_check_options
@click.option("--poll", default=0.5, show_default=True, type=click.FloatRange(min=0.01),
              help="Seconds between the agent's looks for an ask.")
@click.option("--for", "duration", default=None, type=click.FloatRange(min=0), help="Stop after this many seconds.")
@click.option("--work", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the contract jobs an agent provider's agent runs (default: ./marketsched-agent).")
def provider_run_cmd(url, token, token_file, data_dir, server_cert, poll, duration, work):
    """Run a provider's agent: answer the exchange's asks of the distributed randomized clearing
    over its API, with the provider's token, and run the contracts of a provider of kind agent
    on this machine (Ctrl-C or SIGTERM stops it; its jobs run on)."""
    from marketsched.platform.client import Client, ClientError

    from .provider_agent import run_agent

    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read the token file {token_file}: {exc.strerror}") from None
    if not token:
        raise click.UsageError("give the provider's token (--token, --token-file, $MARKETSCHED_TOKEN)")
    client = Client(url, token, check_server=True, server_dir=data_dir, server_cert=server_cert)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    end = None if duration is None else time.monotonic() + duration
    try:
        me = client.get("/api/me")
        if me.get("role") != "provider":
            raise click.ClickException(f"this token is {me.get('role')} {me.get('name')!r}'s: a provider agent needs a "
                                       "provider's token (marketsched exchange token DATA NAME --provider)")
        click.echo(f"provider agent of {me['name']!r} answering the exchange at {url}", err=True)
        stats = run_agent(client, poll, lambda: bool(stop) or (end is not None and time.monotonic() >= end),
                          lambda line: click.echo(line, err=True), work, me["name"])
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        return
    click.echo(json.dumps({"provider": me["name"], "requests": stats.polls, "answered": stats.answered,
                           "refused": stats.refused, "errors": stats.errors}))
