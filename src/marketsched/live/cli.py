"""``marketsched market ...``: run the live market and talk to it.

``serve`` runs the broker in the foreground; every other command is a client of its API
(standard library only). A client talks to the broker's **Unix socket** when given one
(``--socket``, ``$MARKETSCHED_SOCKET``) or a data folder holding one (``--data``,
``$MARKETSCHED_DATA``: ``DATA/market.sock``): the broker then knows the caller by its Unix
account, no token needed. Otherwise it uses HTTP at ``--url`` (``$MARKETSCHED_URL``, default
``http://127.0.0.1:8765``) with the token from ``--token`` (``$MARKETSCHED_TOKEN``) or
``--token-file``, and sends it only to a server shown to be the market's: over plain HTTP on
this host, the one whose socket ``DATA/server.id`` names (``--data``); over ``https``, one
presenting the certificate pinned with ``--server-cert`` (or ``DATA/server-cert.pem``), else
one the system's certificate authorities vouch for (``$SSL_CERT_FILE``). Otherwise it refuses,
sending nothing (:mod:`marketsched.platform.identity`).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import ssl
import stat
import sys
import threading
from datetime import datetime
from pathlib import Path

import click

from marketsched.live.ees_cli import ees as _ees_command
from marketsched.platform.client import (
    DEFAULT_URL,
    Client,
    ClientError,
    party_limit_options,
    server_check_options,
    tls_options,
)
from marketsched.platform.statement import echo_balance_rows, echo_statement
from marketsched.platform.statement import money as _money

SOCKET_NAME = "market.sock"


def client_options(body):
    """The options that say how to reach the broker; the command gets ``client``, a Client."""

    @functools.wraps(body)
    def command(*args, url, token, token_file, socket_path, data_dir, server_cert, **kwargs):
        return body(*args, client=_client(url, token, token_file, socket_path, data_dir, server_cert), **kwargs)

    f = server_check_options(command)
    f = click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="File holding the token (e.g. DATA/admin.token).")(f)
    f = click.option("--token", envvar="MARKETSCHED_TOKEN", default=None, help="Your token [$MARKETSCHED_TOKEN].")(f)
    f = click.option("--url", envvar="MARKETSCHED_URL", default=DEFAULT_URL, show_default=True,
                     help="The market's address [$MARKETSCHED_URL].")(f)
    f = click.option("--data", "data_dir", envvar="MARKETSCHED_DATA", default=None,
                     type=click.Path(file_okay=False, path_type=Path),
                     help=f"The market's data folder: use its Unix socket ({SOCKET_NAME}) if there, else check its "
                          "server.id before sending a token over HTTP [$MARKETSCHED_DATA].")(f)
    f = click.option("--socket", "socket_path", envvar="MARKETSCHED_SOCKET", default=None,
                     type=click.Path(dir_okay=False, path_type=Path),
                     help="The broker's Unix socket: you are your Unix account, no token [$MARKETSCHED_SOCKET].")(f)
    return f


def _client(url, token, token_file, socket_path=None, data_dir=None, server_cert=None) -> Client:
    """The socket if given (``--socket``); else, with a token, HTTP as that token's party, the
    token sent only to a server shown to be the market's (:class:`Client`, ``check_server``:
    ``--data``'s ``server.id`` or a pinned certificate); else the socket found in ``--data``
    (the caller is its Unix account). A token given is who the caller means to be: several
    parties of one Unix account (``--single-user``) each act with their own."""
    if socket_path is not None:
        return Client(socket_path=socket_path)
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read the token file {token_file}: {exc.strerror}") from None
    if not token and data_dir is not None:
        found = data_dir / SOCKET_NAME
        try:
            if stat.S_ISSOCK(os.stat(found).st_mode):
                return Client(socket_path=found)
        except OSError:
            pass
    if not token:
        where = f" (no socket at {data_dir / SOCKET_NAME})" if data_dir is not None else ""
        raise click.ClickException(f"no token: give --token, --token-file or set MARKETSCHED_TOKEN, or use the "
                                   f"broker's Unix socket with --socket or --data{where}")
    return Client(url, token, check_server=True, server_dir=data_dir, server_cert=server_cert)


def _t(x) -> str:
    return "-" if x is None else f"{x:.1f}"


# ---------------------------------------------------------------------------- commands
@click.group("market")
def market() -> None:
    """The live market: a MOSIX-style market sharing this machine among users (Shudler et al. 2010's
    Highest-Bid with k-th price by default), with accounts, a ledger and a web page."""


def _preload() -> None:
    """Import what the broker needs later, before it drops to the service account, which may not
    be able to read the interpreter's files (a Python installed under root's home, say)."""
    import concurrent.futures.thread  # noqa: F401 - imported lazily by concurrent.futures
    import importlib

    import uvicorn.loops.asyncio  # noqa: F401
    import uvicorn.loops.auto  # noqa: F401 - uvicorn picks its event loop by name

    import marketsched.live.api  # noqa: F401
    import marketsched.live.server  # noqa: F401

    importlib.import_module("marketsched.live.web")
    import marketsched

    _ = marketsched.__version__  # read once from the package metadata (3.13 imports its helpers lazily)


def _privileged_launcher(data: Path, service_user: str, config, db_url, dayahead):
    """For ``serve --service-user``: start the privileged launcher (root), drop this process to
    the service account for good, and return the executor that sends jobs to the launcher."""
    from marketsched.platform.launcherd import LauncherExecutor, drop_privileges, prepare_data, service_account, spawn

    if os.geteuid() != 0:
        raise ValueError("--service-user: start the broker as root (it drops to the service account itself)")
    if db_url is not None or dayahead != "off":
        raise ValueError("--service-user works with the SQLite database in --data and without --dayahead")
    config.check()
    pw = service_account(service_user)
    prepare_data(data, pw)
    client = spawn(data / "jobs", pw.pw_uid, config.limits(), data / "market.db")
    try:
        _preload()
        drop_privileges(service_user)
        return LauncherExecutor(data / "jobs", client)
    except BaseException:
        client.close()
        raise


@market.command("serve")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=Path("market"), show_default=True,
              help="Folder for the database, the jobs' working folders and admin.token.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free port).")
@click.option("--slots", default=2, show_default=True, type=click.IntRange(min=1), help="Jobs that run at once.")
@click.option("--mechanism", default="hb", show_default=True,
              type=click.Choice(["hb", "nphb", "wsept", "wspt", "dlgm", "pdlgm", "ees", "relaxed-ees"]),
              help="Allocation rule (Shudler et al. 2010): HB preempts; NPHB, WSEPT do not "
                   "(WSPT here = WSEPT). dlgm, pdlgm: the DLGM compensation market (Stößer 2009, ch. 5), "
                   "each slot (with --executor slurm: each Slurm node) a node with its own queue; jobs give a "
                   "weight and a reported run time. ees, relaxed-ees: the batch queue whose head runs or is "
                   "discarded (Mutz 2008, ch. 4 and 6) on --slots CPUs; jobs give a value, a delay cost or "
                   "patience and a declared run time.")
@click.option("--ees-value-prior", nargs=2, type=float, default=(0.0, 100.0), show_default=True,
              metavar="LOW HIGH", help="EES: the declared uniform prior of the values.")
@click.option("--ees-delay-prior", nargs=2, type=float, default=(0.0, 1.0), show_default=True,
              metavar="LOW HIGH", help="EES: the declared uniform prior of the delay costs per second.")
@click.option("--ees-draws", default=200, show_default=True, type=click.IntRange(1, 10**6),
              help="EES: Monte Carlo draws per expectation of the payments.")
@click.option("--ees-seed", default=0, show_default=True, type=click.IntRange(0), help="EES: seed of the draws.")
@click.option("--pricing", default="kth", show_default=True, type=click.Choice(["kth", "first"]),
              help="Payment rule per second of running time.")
@click.option("--charge-interval", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds between postings of running jobs' charges to the ledger.")
@click.option("--admission-seconds", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="A job is admitted if its owner can pay this many seconds at max(bid, 1).")
@click.option("--sync", default="full", show_default=True, type=click.Choice(["full", "normal"]),
              help="SQLite durability: full = fsync at every commit (survives power loss); normal = survives "
                   "a crash of the broker, not of the machine, and is faster.")
@click.option("--db", "db_url", default=None, metavar="URL",
              help="postgresql://... for a shared database (needs psycopg); default: SQLite in --data.")
@click.option("--executor", default="local", show_default=True, type=click.Choice(["local", "slurm"]),
              help="Where jobs run: local process groups, or Slurm batch jobs (sbatch, priorities, "
                   "suspend/resume; see docs/slurm_and_dayahead.md).")
@click.option("--partition", default=None, help="Slurm partition for --executor slurm (default: Slurm's default).")
@click.option("--single-user/--multi-user", "single_user", default=None,
              help="Single-user: every job runs as the broker's own account (one person, a demo; the default "
                   "when not root). Multi-user: each job runs as its owner's Unix account (`user add NAME --unix "
                   "ACCOUNT`), contained in its own cgroup; needs root (the default as root).")
@click.option("--service-user", default=None, metavar="ACCOUNT",
              help="Started as root: run the broker (database, token, API) as this unprivileged account; a small "
                   "privileged launcher process keeps root to start, freeze and kill jobs as their owners "
                   "(multi-user mode; see docs/live_market.md).")
@click.option("--job-cpus", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="CPU limit per job, in CPUs (cgroup cpu quota; 0: no limit).")
@click.option("--job-memory", default="auto", show_default=True, metavar="BYTES|auto|0",
              help="Memory limit per job in bytes (suffixes K, M, G), 'auto' = the machine's memory / --slots, "
                   "0 = no limit.")
@click.option("--job-processes", default=512, show_default=True, type=click.IntRange(0, 4_194_304),
              help="Processes (and threads) a job may have at once (cgroup pids.max; a fork beyond fails inside "
                   "the job); 0 = no limit.")
@click.option("--dayahead", default="off", show_default=True, type=click.Choice(["off", "dpgva", "relaxed"]),
              help="Also run the day-ahead reservation auction (Mutz 2008, ch. 5 / 7): placebid, showres.")
@click.option("--da-clear-at", default="18:00", show_default=True,
              help="Daily clearing time HH:MM (reserves the next day), or +SECONDS for one round that clears "
                   "SECONDS after start (demos, tests).")
@click.option("--da-lead", default=0.0, type=click.FloatRange(min=0), show_default=True,
              help="With +SECONDS: the reserved period starts this many seconds after the clearing.")
@click.option("--da-horizon", default=86400.0, type=click.FloatRange(min=0, min_open=True), show_default=True,
              help="Length of the reserved period (s).")
@click.option("--da-granularity", default=900.0, type=click.FloatRange(min=0, min_open=True), show_default=True,
              help="Time slot of the auction (s).")
@click.option("--da-capacity", default=1, type=click.IntRange(min=1), show_default=True,
              help="Nodes sold (relaxed: CPUs; local executor: slots held for reservations).")
@click.option("--da-depth", default=1000, type=click.IntRange(min=1), show_default=True,
              help="Relaxed DPGVA search depth.")
@click.option("--socket", "socket_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help=f"The Unix socket local users reach the broker on, as their Unix account [default: DATA/{SOCKET_NAME}].")
@tls_options
@party_limit_options
@click.option("--max-connections", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Open connections at most (also capped by the open-file limit); when full, a new one takes the "
                   "place of the longest-idle one.")
@click.option("--header-timeout", default=10.0, show_default=True, type=click.FloatRange(0, 3600, min_open=True),
              help="Seconds a client has to send a request's headers (and a TLS handshake).")
@click.option("--max-jobs-per-user", default=100, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Active jobs (queued, running, preempted, held) one user may have; more: HTTP 429.")
@click.option("--max-command-bytes", default=65536, show_default=True, type=click.IntRange(1, 1 << 20),
              help="Longest command line a job may have; longer: HTTP 413.")
def serve(data, host, port, slots, mechanism, pricing, charge_interval, admission_seconds, sync, db_url,
          executor, partition, single_user, service_user, job_cpus, job_memory, job_processes, dayahead, da_clear_at, da_lead, da_horizon,
          da_granularity, da_capacity, da_depth, socket_path, tls_cert, tls_key, insecure_http, max_connections,
          header_timeout, max_jobs_per_user, max_command_bytes, party_limits, ees_value_prior=(0.0, 100.0),
          ees_delay_prior=(0.0, 1.0), ees_draws=200, ees_seed=0) -> None:
    """Run the market broker (HTTP API, web page, Unix socket, local executor) until interrupted.

    Once it listens it writes DATA/ready (`marketsched market wait` returns then). On
    SIGINT/SIGTERM the market posts charges and suspends running jobs, which stay suspended; the
    next `serve` with the same --data re-attaches and resumes them (cancel a job first to end it).
    After a crash (kill -9), the same happens at restart.
    """
    from marketsched.live.broker import Broker, MarketConfig
    from marketsched.live.server import MarketServer
    from marketsched.platform.server import Limits, check_plain_http, raise_fd_limit

    _remove_ready(data, stale_only=True)  # a broker killed with -9 left its own: `market wait` waits for this one
    memory = _bytes(job_memory, "--job-memory")
    try:
        check_plain_http(host, tls_cert is not None, insecure_http)
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        raise_fd_limit()
        # Every request passes from the server's event-loop thread to a worker thread (the
        # broker's calls block) and back; with Python's default 5 ms GIL switch interval a busy
        # thread keeps the other waiting up to 5 ms at each hand-off. 0.5 ms: about 1.4x the
        # submissions per second under load (benchmarks/bench_live.py), for the same CPU time.
        sys.setswitchinterval(0.0005)
        dlgm = mechanism in ("dlgm", "pdlgm")
        ees = mechanism in ("ees", "relaxed-ees")
        if (dlgm or ees) and click.get_current_context().get_parameter_source("pricing") \
                is click.core.ParameterSource.COMMANDLINE:
            raise ValueError(f"--pricing is the priority markets' payment per second (hb, nphb, wsept); "
                             f"{mechanism} has its own payments")
        if dlgm and service_user is not None:
            raise ValueError(f"--mechanism {mechanism} runs without --service-user")
        if ees and (executor != "local" or service_user is not None):
            raise ValueError(f"--mechanism {mechanism} runs on the local executor, without --service-user")
        config = MarketConfig(slots=slots, mechanism="hb" if dlgm or ees else mechanism, pricing=pricing, charge_interval=charge_interval,
                              admission_seconds=admission_seconds, sync=sync, executor=executor, partition=partition,
                              single_user=single_user, launcher=service_user is not None, job_cpus=job_cpus,
                              job_memory=memory, job_processes=job_processes, max_jobs_per_user=max_jobs_per_user,
                              max_command_bytes=max_command_bytes)
        jobs_executor = None
        if service_user is not None:
            jobs_executor = _privileged_launcher(data, service_user, config, db_url, dayahead)
        broker = Broker(data, config, db_url=db_url, executor=jobs_executor)
        if dlgm:
            from marketsched.live.dlgm_service import DLGMService

            dex = None
            if executor == "slurm":  # each DLGM node a Slurm node
                from marketsched.live.dlgm_slurm import DLGMSlurmExecutor

                dex = DLGMSlurmExecutor(data / "dlgm", partition=partition)
            broker.dlgm = DLGMService(broker, preemptive=mechanism == "pdlgm", executor=dex)
        if ees:
            from marketsched.live.ees_service import EESService

            broker.ees = EESService(broker, mechanism, value=ees_value_prior, delay_cost=ees_delay_prior,
                                    n_draws=ees_draws, seed=ees_seed)
    except (ValueError, RuntimeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    token = broker.ensure_admin()
    if dayahead != "off":
        from marketsched.live.dayahead import DayAhead, config_from_clock, daily_config

        kw = dict(mechanism=dayahead, horizon=da_horizon, granularity=da_granularity, capacity=da_capacity,
                  depth=da_depth)
        try:
            if da_clear_at.startswith("+"):
                cfg = config_from_clock(broker._t, float(da_clear_at[1:]), da_lead, repeat=0.0, **kw)
            else:
                cfg = daily_config(broker.epoch, broker._t, da_clear_at, **kw)
            broker.dayahead = DayAhead(broker, cfg).start()
        except ValueError as exc:
            broker.stop()
            raise click.ClickException(f"day-ahead auction: {exc}") from None
    sock = socket_path if socket_path is not None else data / SOCKET_NAME
    try:
        server = MarketServer(broker, host, port, socket_path=sock, tls_cert=tls_cert, tls_key=tls_key,
                              insecure_http=insecure_http,
                              limits=Limits(max_connections=max_connections, header_timeout=header_timeout,
                                            **party_limits))
    except (OSError, ValueError, ssl.SSLError) as exc:
        broker.stop()
        raise click.ClickException(f"cannot listen on {host}:{port} and {sock}: {exc}") from None
    broker.start()
    if broker.dlgm is not None:
        broker.dlgm.start()
    if broker.ees is not None:
        broker.ees.start()
    payments = {"dlgm": "compensations between jobs", "pdlgm": "compensations between jobs",
                "ees": "expected-externality payments", "relaxed-ees": "expected-externality payments"}
    click.echo(f"market: {mechanism} with {payments.get(mechanism, pricing + ' price')}, {slots} slot(s), "
               f"{executor} executor, database {broker.store.location}", err=True)
    if broker.single_user:
        click.echo(f"single-user mode: every job runs as uid {os.geteuid()} (the broker's account)", err=True)
    else:
        click.echo("multi-user mode: each job runs as its owner's Unix account", err=True)
    if service_user is not None:
        click.echo(f"broker runs as {service_user} (uid {os.geteuid()}); jobs are started by the privileged "
                   "launcher (root)", err=True)
    layout = getattr(broker.executor, "layout", None)
    if layout is not None:
        click.echo(f"job containment: {layout.describe()}", err=True)
        click.echo(f"job limits (each job): {broker.executor.limits.describe()}", err=True)
    if mechanism == "wspt":
        click.echo("note: WSPT needs actual run times, unknown before a job ends; it uses the runtime estimate (WSEPT)",
                   err=True)
    click.echo(f"web page and API at {server.url}/; Unix socket {sock} (local users, no token)", err=True)
    if token:
        click.echo(f"administrator token written to {data / 'admin.token'}", err=True)
    done = threading.Event()

    def _stop(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server.serve_in_thread()
    _write_ready(data, server.url, sock)
    click.echo(f"READY {server.url} (written to {data / READY_NAME}; `marketsched market wait` returns now)", err=True)
    done.wait()
    _remove_ready(data)
    click.echo("stopping: posting charges and suspending running jobs", err=True)
    server.shutdown()
    broker.stop(kill_jobs=False)


READY_NAME = "ready"


def _write_ready(data: Path, url: str, sock: Path) -> None:
    """DATA/ready: the serving broker's pid, URL and socket as JSON (readable by anyone who can
    pass through DATA, 0711: it holds no secret), written once the server listens and removed
    when it stops, so `market wait` need not guess how long a start-up takes."""
    path = data / READY_NAME
    tmp = path.with_name(f".{READY_NAME}.{os.getpid()}")
    tmp.write_text(json.dumps({"pid": os.getpid(), "url": url, "socket": str(sock)}) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _remove_ready(data: Path, stale_only: bool = False) -> None:
    """Remove DATA/ready; ``stale_only``: only if its broker is gone (a second `serve` on the
    same folder, which will fail, leaves the running one's)."""
    if stale_only:
        try:
            if _alive(int(json.loads((data / READY_NAME).read_text())["pid"])):
                return
        except (OSError, ValueError, KeyError, TypeError):
            pass
    try:
        (data / READY_NAME).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:  # not ours to remove (another account's broker): serve says why it fails later
        click.echo(f"note: cannot remove {data / READY_NAME}: {exc.strerror}", err=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another account's process: alive
        return True
    return True


def _ready(data: Path) -> dict | None:
    """The ready file's contents when its broker is alive and answers its health check, else None."""
    try:
        info = json.loads((data / READY_NAME).read_text())
        pid, url = int(info["pid"]), str(info["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        return None  # a broker that died without removing it (kill -9): wait for the next
    try:
        Client(url, None, timeout=5).get("/api/health")
    except ClientError:
        return None
    return info


@market.command("wait")
@click.option("--data", "data_dir", envvar="MARKETSCHED_DATA", default=Path("market"), show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The market's data folder (the one given to `market serve --data`) [$MARKETSCHED_DATA].")
@click.option("--job", "job_id", type=click.IntRange(min=1), default=None,
              help="Then wait until this job has ended (completed, cancelled or failed); the job is read with "
                   "--token, else through the broker's Unix socket.")
@click.option("--token", envvar="MARKETSCHED_TOKEN", default=None, help="Your token [$MARKETSCHED_TOKEN].")
@click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Give up (exit status 1) after this many seconds of waiting.")
def wait(data_dir, job_id, token, timeout) -> None:
    """Wait until the market in --data is ready (`market serve` writes DATA/ready once it listens
    and its health check answers), print its address, and return; with --job, also until that
    job has ended. For scripts and walkthroughs: a start-up takes longer on a busy machine, and
    no fixed sleep is long enough."""
    import time

    from marketsched.platform.ledger import FINAL_STATES

    deadline = time.monotonic() + timeout
    while (info := _ready(data_dir)) is None:
        if time.monotonic() > deadline:
            raise click.ClickException(f"no market became ready in {data_dir} within {timeout:g} s (is `marketsched "
                                       f"market serve --data {data_dir}` running? its output says why not)")
        time.sleep(0.2)
    if job_id is None:
        click.echo(info["url"])
        return
    sock = Path(info["socket"])
    client = Client(info["url"], token) if token else Client(socket_path=sock)
    while (state := client.get(f"/api/jobs/{job_id}")["state"]) not in (*FINAL_STATES, "stopped"):  # DLGM: at its run time
        if time.monotonic() > deadline:
            raise click.ClickException(f"job {job_id} is still {state} after {timeout:g} s")
        time.sleep(0.2)
    click.echo(f"job {job_id} {state}")


@market.group("user")
def user() -> None:
    """Users (administrator)."""


@user.command("add")
@click.argument("name")
@click.option("--deposit", default=0.0, type=float, show_default=True, help="Initial deposit.")
@click.option("--unix", "unix", default=None, metavar="ACCOUNT",
              help="The Unix account NAME is: on the broker's Unix socket ACCOUNT's processes act as NAME (no "
                   "token), and NAME's jobs run as ACCOUNT.")
@client_options
def user_add(name, deposit, unix, client) -> None:
    """Create user NAME; prints their token (give it to them) on stdout."""
    body = {"name": name, "deposit": deposit}
    if unix is not None:
        body["unix"] = unix
    out = client.post("/api/users", body)
    linked = f", Unix account {out['unix']}" if out.get("unix") else ""
    click.echo(f"user {out['name']} created with balance {_money(out['balance'])}{linked}", err=True)
    click.echo(out["token"])


@user.command("token")
@click.argument("name")
@client_options
def user_token(name, client) -> None:
    """Issue user NAME a new token, printed on stdout; the old one stops working at once
    (administrator; a user may renew their own)."""
    out = client.post(f"/api/users/{name}/token", {})
    click.echo(f"new token for {out['name']}; the old one no longer works", err=True)
    click.echo(out["token"])


@market.command("deposit")
@click.argument("name")
@click.argument("amount", type=float)
@client_options
def deposit(name, amount, client) -> None:
    """Add AMOUNT to user NAME's balance (administrator)."""
    out = client.post(f"/api/users/{name}/deposit", {"amount": amount})
    click.echo(f"{out['name']}: balance {_money(out['balance'])}")


@market.command("submit", context_settings={"ignore_unknown_options": True})
@click.option("--bid", default=None, type=float, help="Bid per second of running time (needed but on an EES market).")
@click.option("--estimate", default=None, type=float, help="Runtime estimate in seconds (needed by WSEPT).")
@click.option("--cpus", "--procs", "procs", default=1, type=int, show_default=True,
              help="CPUs the job runs on, all at once (on Slurm possibly across nodes); it pays per CPU.")
@click.option("--restartable", is_flag=True,
              help="On Slurm: once preempted, it may restart from the beginning on another node instead of "
                   "waiting for its own (what it was charged stays charged).")
@click.option("--runtime", default=None, type=float,
              help="DLGM market: the reported run time in seconds (the job is stopped then); --bid is the weight, "
                   "per second of waiting.")
@click.option("--node", default=None, type=int, help="DLGM market: the node to join (default: the best utility).")
@click.option("--value", default=None, type=float,
              help="EES market: what running the job is worth (give --runtime and --delay-cost or --patience; "
                   "--bid is not used).")
@click.option("--delay-cost", default=None, type=float, help="EES market: cost per second of waiting.")
@click.option("--patience", default=None, type=float,
              help="EES market: seconds the job would wait (delay cost = value / patience).")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@client_options
def submit(bid, estimate, procs, restartable, runtime, node, value, delay_cost, patience, as_json, command,
           client) -> None:
    """Submit COMMAND (after --, e.g. `-- sleep 10`); prints the job id and its state.

    One argument is taken as a shell command line (`-- 'echo a; sleep 5'`); several are quoted
    as separate arguments. On a DLGM market give --runtime (and optionally --node); on an EES
    market --value, --delay-cost or --patience, --runtime (and --cpus under relaxed EES).
    """
    cmd = command[0] if len(command) == 1 else list(command)
    if value is not None:
        given = click.get_current_context().get_parameter_source("procs") != click.core.ParameterSource.DEFAULT
        _ees_submit(client, value, delay_cost, patience, runtime, procs if given else None, cmd, as_json)
        return
    if bid is None:
        raise click.UsageError("give --bid (or, on an EES market, --value)")
    if runtime is not None or node is not None:
        _dlgm_submit(client, bid, runtime, node, cmd, as_json)
        return
    body = {"bid": bid, "command": cmd, "estimate": estimate, "procs": procs}
    if restartable:
        body["restartable"] = True
    job = client.post("/api/jobs", body)
    if as_json:
        click.echo(json.dumps(job, indent=2))
    else:
        click.echo(f"job {job['id']} {job['state']}")


@market.command("list")
@click.option("--state", default=None, help="Comma-separated states (queued,running,preempted,held,completed,...).")
@click.option("--limit", default=None, type=click.IntRange(1, 1000), help="Only the newest N jobs (at most 1000).")
@click.option("--before", default=None, type=click.IntRange(min=1), help="Only jobs whose id is below this (paging back).")
@click.option("--json", "as_json", is_flag=True)
@client_options
def list_jobs(state, limit, before, as_json, client) -> None:
    """Your jobs (the administrator sees all), the newest 1000 unless --limit / --before say otherwise."""
    q = []
    if state:
        q.append(f"state={state}")
    if limit:
        q.append(f"limit={limit}")
    if before:
        q.append(f"before={before}")
    jobs = client.get("/api/jobs" + ("?" + "&".join(q) if q else ""))
    if as_json:
        click.echo(json.dumps(jobs, indent=2))
        return
    if jobs and "weight" in jobs[0]:
        _dlgm_list(jobs)
        return
    click.echo(f"{'id':>5} {'user':<10} {'bid':>8} {'state':<10} {'ran s':>7} {'charged':>10} {'exit':>4}  command")
    for j in jobs:
        ec = "-" if j["exit_code"] is None else j["exit_code"]
        click.echo(f"{j['id']:>5} {j['owner']:<10} {j['bid']:>8g} {j['state']:<10} {j['run_seconds']:>7.1f} "
                   f"{j['accrued']:>10.4f} {ec!s:>4}  {j['command']}"
                   + (f"\n      {j['note']}" if j["state"] == "discarded" else ""))  # an EES market's reason


@market.command("show")
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@client_options
def show(job_id, as_json, client) -> None:
    """One job: state, charges, events, the end of its stdout and stderr."""
    j = client.get(f"/api/jobs/{job_id}")
    if as_json:
        click.echo(json.dumps(j, indent=2))
        return
    if "weight" in j:  # a DLGM job
        click.echo(f"job {j['id']} of {j['owner']}: {j['state']} on node {j['node']}, weight {j['weight']:g}/s, "
                   f"reported run time {j['runtime']:g} s, net paid {_money(j['payment'])}")
        click.echo(f"  command: {j['command']}")
        for e in j["events"]:
            click.echo(f"  {e['t']:>10.2f}  {e['kind']:<10} {e['detail']}")
        return
    if "payments" in j and "value" in j:  # an EES job
        paid = sum((x["amount"] if x["from_account"].startswith("user:") else -x["amount"]) for x in j["payments"])
        click.echo(f"job {j['id']} of {j['owner']}: {j['state']}, value {j['value']:g}, declared run time "
                   f"{j['runtime']:g} s, {j['cpus']} CPU(s), net paid {_money(paid / 1e6)}"
                   + (f"\n  {j['note']}" if j.get("note") else ""))
        click.echo(f"  command: {j['command']}")
        for e in j["events"]:
            click.echo(f"  {e['t']:>10.2f}  {e['kind']:<10} {e['detail']}")
        return
    click.echo(f"job {j['id']} of {j['owner']}: {j['state']}" + ("" if j["exit_code"] is None else f", exit code {j['exit_code']}"))
    click.echo(f"  bid {j['bid']:g}/s, ran {j['run_seconds']:.1f} s, paying {j['rate']:g}/s now, "
               f"charged {_money(j['accrued'])}, preempted {j['preemptions']} time(s)")
    click.echo(f"  command: {j['command']}")
    click.echo(f"  folder:  {j['workdir']}")
    for e in j["events"]:
        click.echo(f"  {e['t']:>10.2f}  {e['kind']:<10} {e['detail']}")
    for name in ("stdout", "stderr"):
        if j[name]:
            click.echo(f"--- {name} (end) ---")
            click.echo(j[name].rstrip("\n"))


@market.command("cancel")
@click.argument("job_id")
@client_options
def cancel(job_id, client) -> None:
    """Cancel a job (kills its processes; what it ran is charged)."""
    j = client.post(f"/api/jobs/{job_id}/cancel")
    if "was" in j:  # a DLGM job: see docs/dlgm.md, "Cancellation"
        click.echo(f"job {j['id']} {j['state']} (was {j['was']} on node {j['node']}); no money moves: what it paid "
                   "stays with the jobs it overtook, what it received stays yours")
        return
    click.echo(f"job {j['id']} {j['state']}, charged {_money(j['charged'])}")


@market.command("rebid")
@click.argument("job_id")
@click.argument("bid", type=float)
@client_options
def rebid(job_id, bid, client) -> None:
    """Change job JOB_ID's bid to BID (per second of running time); the market decides at once."""
    j = client.post(f"/api/jobs/{job_id}/bid", {"bid": bid})
    click.echo(f"job {j['id']} {j['state']}, bid {j['bid']:g}")


@market.command("price")
@click.option("--history", is_flag=True, help="The price history too.")
@click.option("--json", "as_json", is_flag=True)
@client_options
def price(history, as_json, client) -> None:
    """The current price (per second of running time) and the market's state."""
    c = client
    p = c.get("/api/price")
    h = c.get("/api/price/history") if history else None
    if as_json:
        click.echo(json.dumps({"price": p, "history": h} if history else p, indent=2))
        return
    if "dlgm" in p:
        _echo_nodes(p)
        return
    if "ees" in p:
        _echo_ees(p["ees"])
        return
    click.echo(f"price {p['price']:g}/s ({p['mechanism']}, {p['pricing']} price); running {p['running']}/{p['slots']}, "
               f"queued {p['queued']}, held {p['held']}")
    if p["best_queued_key"] is not None:
        click.echo(f"best queued priority {p['best_queued_key']:g}; lowest running {p['lowest_running_key']:g}")
    for t in h or []:
        stamp = datetime.fromtimestamp(p["time"] - p["t"] + t["t"]).strftime("%H:%M:%S")
        click.echo(f"  {stamp}  {t['price']:>10g}  running {t['running']} queued {t['queued']}")


@market.command("balance")
@click.option("--json", "as_json", is_flag=True)
@client_options
def balance(as_json, client) -> None:
    """Your balance (administrator: everyone's, the revenue and the deposits)."""
    b = client.get("/api/balance")
    if as_json:
        click.echo(json.dumps(b, indent=2))
    elif "users" in b:
        echo_balance_rows([*((u, v["balance"], f"accruing {_money(v['accruing'])}") for u, v in b["users"].items()),
                           ("revenue", b["revenue"], ""), ("deposits", b["deposits"], "")])
    else:
        click.echo(f"{b['user']}: {_money(b['balance'])} (accruing {_money(b['accruing'])})")


@market.command("statement")
@click.option("--user", "name", default=None, help="Administrator: whose statement.")
@click.option("--limit", default=200, type=click.IntRange(min=1), show_default=True)
@click.option("--json", "as_json", is_flag=True)
@client_options
def statement(name, limit, as_json, client) -> None:
    """Ledger entries of your account: deposits (+) and charges (-)."""
    q = f"?limit={limit}" + (f"&user={name}" if name else "")
    s = client.get("/api/statement" + q)
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    echo_statement(s, "job")


@market.command("placebid", context_settings={"ignore_unknown_options": True})
@click.option("--length", required=True, type=float, help="Seconds of reserved time needed.")
@click.option("--deadline", required=True, type=float, help="Seconds from the reserved period's start by which it must end.")
@click.option("--value", "--max-price", "value", required=True, type=float,
              help="Maximum price (total) for the reservation; held in escrow until clearing.")
@click.option("--nodes", default=None, type=int, help="Nodes (relaxed auction; DPGVA sells the whole machine).")
@click.option("--json", "as_json", is_flag=True)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@client_options
def placebid(length, deadline, value, nodes, as_json, command, client) -> None:
    """A sealed day-ahead bid (Mutz 2008's placebid); optional COMMAND after -- runs in the reservation."""
    body = {"length": length, "deadline": deadline, "value": value}
    if nodes is not None:
        body["nodes"] = nodes
    if command:
        import shlex

        body["command"] = command[0] if len(command) == 1 else shlex.join(command)
    b = client.post("/api/dayahead/bids", body)
    if as_json:
        click.echo(json.dumps(b, indent=2))
    else:
        click.echo(f"bid {b['id']} sealed for round {b['round']} (escrow {_money(b['value'])})")


@market.command("showres")
@click.option("--json", "as_json", is_flag=True)
@client_options
def showres(as_json, client) -> None:
    """Day-ahead bids and reservations (showres, as in Mutz 2008); the next clearing."""
    r = client.get("/api/dayahead")
    if as_json:
        click.echo(json.dumps(r, indent=2))
        return
    n = r["next"]
    if n:
        click.echo(f"{r['mechanism']}: round {n['round']} clears at {n['clear_time']} for the period from "
                   f"{n['period_start_time']} ({n['horizon']:g} s, slots of {r['granularity']:g} s)")
    else:
        click.echo(f"{r['mechanism']}: closed (every round cleared)")
    click.echo(f"{'bid':>5} {'user':<10} {'len s':>7} {'dl s':>7} {'value':>9} {'state':<7} {'price':>9}  reservation")
    for b in r["bids"]:
        when = f"{b['start_time']} .. {b['end_time']} {b['reservation']}" if b.get("start_time") else ""
        job = f" job {b['job_state']}" if b.get("job_state") else ""
        click.echo(f"{b['id']:>5} {b['owner']:<10} {b['length']:>7g} {b['deadline']:>7g} {b['value']:>9g} "
                   f"{b['state']:<7} {b['price']:>9g}  {when}{job}")


def _bytes(text: str, param: str) -> int | None:
    """``"auto"`` -> None (the default); ``"0"`` -> 0 (no limit); ``"512M"``, ``"2G"``, ``"1048576"`` -> bytes."""
    t = text.strip().lower()
    if t == "auto":
        return None
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(t[-1:], 1)
    digits = t[:-1] if t[-1:] in "kmgt" and t[-1:] else t
    try:
        value = float(digits)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value * mult < 2**63):
        raise click.BadParameter(f"{text!r} is not a size in bytes (e.g. 512M, 2G), 'auto' or 0", param_hint=param)
    return int(value * mult)


def _number_list(text: str, param: str, kind=float) -> list:
    """``"1,2,1.5"`` -> numbers; click.BadParameter naming ``param`` for anything else."""
    items = [t.strip() for t in text.split(",")]
    if "" in items:
        raise click.BadParameter(f"{text!r} is not a comma-separated list (an entry is empty)", param_hint=param)
    out = []
    for t in items:
        try:
            out.append(kind(t))
        except ValueError:
            raise click.BadParameter(f"{t!r} is not {'an integer' if kind is int else 'a number'}",
                                     param_hint=param) from None
    return out


def _cpu_market_options(f):
    """The options ``market tycoon`` and ``market share`` share: --duration, --every, --enforcement."""
    for opt in reversed([
        click.option("--duration", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
                     help="Seconds to run."),
        click.option("--every", default=5.0, show_default=True, type=click.FloatRange(min=0),
                     help="Seconds between tables (0: one table, at the end)."),
        click.option("--enforcement", default="auto", show_default=True,
                     type=click.Choice(["auto", "cgroup2", "cgroup1", "stride"]),
                     help="How shares are enforced: cgroup v2 cpu.weight, cgroup v1 cpu.shares, or user-space "
                          "stride scheduling (auto: the first that works, in that order)."),
    ]):
        f = opt(f)
    return f


def _run_cpu_market(mk, what: str, banner, table, duration: float, every: float) -> None:
    """Run a live proportional-share market (:class:`~marketsched.live.tycoon.CpuShareHosts`) from
    the command line: start it, print ``banner()``, call ``table(t, period, cpu, measured)`` every
    ``every`` seconds (0: once, at the end) for ``duration`` seconds, then stop it. Its jobs and
    cgroups are removed at the end, on Ctrl-C and on SIGTERM (a second one does not cut the
    cleanup short)."""

    def _term(signum, frame):
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, _term) if main_thread else None
    try:
        try:
            mk.start()
        except (RuntimeError, OSError) as exc:
            raise click.ClickException(f"cannot start {what}: {exc}") from None
        click.echo(banner())
        t = 0.0
        while t < duration - 1e-9:
            period = min(every or duration, duration - t)
            cpu, measured = mk.measure(period)
            t += period
            table(t, period, cpu, measured)
    except KeyboardInterrupt:
        click.echo("interrupted: stopping the jobs", err=True)
        raise click.Abort() from None
    finally:
        if main_thread:  # a second Ctrl-C or SIGTERM must not cut the cleanup short
            old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            mk.stop()
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, old_int)
                signal.signal(signal.SIGTERM, old_term)
    click.echo(f"stopped: {len(mk.jobs)} jobs killed" + (", cgroups removed" if mk.root is not None else ""))


@market.command("tycoon")
@click.option("--hosts", default=None, metavar="CPUS",
              help="Comma-separated CPU numbers, one host each (default: the first two CPUs this process may "
                   "use, or all of them if fewer).")
@click.option("--budgets", default="1,2,1.5", show_default=True, help="Users' budgets, comma-separated (> 0).")
@click.option("--weights", default=None, metavar="W",
              help="Users' private weights per host: hosts separated by ',', users by ';' (e.g. "
                   "\"0.7,0.3;0.2,0.8;0.5,0.5\"). Default: that example for 3 users on 2 hosts, else equal weights.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds between the agents' re-splits.")
@_cpu_market_options
def tycoon(hosts, budgets, weights, interval, duration, every, enforcement) -> None:
    """Tycoon mode (Feldman, Lai & Zhang 2005): a proportional-share market over this machine's CPUs.

    One CPU-bound job per (user, host); every --interval each user's agent re-splits its budget
    across the hosts with the best response (Feldman, Lai and Zhang, EC 2005, sec. 4.1) and host j
    gives user i the share bid_ij / sum_k bid_kj. Every --every seconds a table shows each user's
    bids, the shares they give and the measured fraction of each host's CPU time. The jobs and
    cgroups are removed at the end, on Ctrl-C and on SIGTERM.
    """
    import numpy as np

    from marketsched.live.tycoon import TycoonMarket

    if hosts is None:
        cpus = sorted(os.sched_getaffinity(0))[:2]
    else:
        cpus = _number_list(hosts, "--hosts", int)
    budget_list = _number_list(budgets, "--budgets")
    m, n = len(budget_list), len(cpus)
    if weights is None:
        w = [[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]] if (m, n) == (3, 2) else [[1.0] * n for _ in range(m)]
    else:
        w = [_number_list(row, "--weights") for row in weights.split(";")]
        if len({len(row) for row in w}) != 1:
            raise click.BadParameter("every user needs one weight per host (rows of different lengths)",
                                     param_hint="--weights")
    try:
        tm = TycoonMarket(cpus, budget_list, w, interval=interval, enforcement=enforcement)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    def table(t: float, period: float, cpu, measured) -> None:
        rounds, bids, share = tm.snapshot()
        click.echo(f"t={t:.1f} s, round {rounds}; measured = fraction of the host's CPU time over the last "
                   f"{period:.1f} s")
        click.echo(f"{'user':>4} {'budget':>7} {'host':>4} {'bid':>8} {'share':>7} {'measured':>8} {'cpu s':>6}")
        for i in range(m):
            for j in range(n):
                click.echo(f"{i:>4} {budget_list[i]:>7g} {cpus[j]:>4} {bids[i, j]:>8.4f} {share[i, j]:>7.4f} "
                           f"{measured[i, j]:>8.4f} {cpu[i, j]:>6.2f}")
        click.echo(f"max |measured - share|: {np.abs(measured - share).max():.4f}")

    _run_cpu_market(tm, "the Tycoon market",
                    lambda: f"tycoon: {m} users on hosts (CPUs) {','.join(map(str, cpus))}; enforcement "
                            f"{tm.enforcement}; agents re-split every {interval:g} s for {duration:g} s",
                    table, duration, every)


@market.command("share")
@click.option("--rule", required=True, type=click.Choice(["ps", "sh"]),
              help="Allocation rule: ps (Proportional Share) or sh (Sanghavi-Hajek).")
@click.option("--host", default=None, type=int, metavar="CPU",
              help="The CPU the jobs share (default: the first CPU this process may use).")
@click.option("--cpus", "ncpus", default=1, show_default=True, type=click.IntRange(min=1),
              help="Share a pool of this many CPUs (the first ones this process may use): each job, serial, gets "
                   "min(1, share x N) CPUs, enforced by placement, CPU quotas and weights.")
@click.option("--bids", default=None, metavar="B",
              help="Fixed bids per period, one per job, comma-separated (>= 0, one > 0), e.g. \"3,2,1\".")
@click.option("--values", default=None, metavar="V",
              help="The jobs' values per CPU-second, comma-separated (>= 1), for --bidder zic (each job bids "
                   "uniformly on {1..v} every period) or q-learning.")
@click.option("--bidder", default="fixed", show_default=True, type=click.Choice(["fixed", "zic", "q-learning"]),
              help="fixed: the --bids every period; zic, q-learning: the simulator's ZIC or Q-learning bidder "
                   "(Stößer 2009, section 6.4.1) on the --values.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the bidders' draws.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds per period (the thesis's round is one second).")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A market's data folder (not being served): book every period's payments in its ledger.")
@click.option("--users", default=None, metavar="NAMES",
              help="With --data: the market user who owns (and pays for) each job, comma-separated.")
@click.option("--books", "books_name", default="share", show_default=True, metavar="NAME",
              help="With --data: the name of this share market's books (the same name continues them).")
@click.option("--serve", "serve_port", default=None, type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve the market's page on http://127.0.0.1:PORT/ (0: any free port); it prints a viewer "
                   "token, which the page asks for.")
@_cpu_market_options
def share(rule, host, ncpus, bids, values, bidder, seed, interval, data, users, books_name, serve_port, duration,
          every, enforcement) -> None:
    """Proportional Share or Sanghavi-Hajek (Stößer 2009, ch. 6) as a running market on one CPU or --cpus N.

    One CPU-bound job per bid (or value); every --interval each job bids (fixed bids, or the
    simulator's ZIC or Q-learning bidder), the simulator's rule turns the bids into shares of the CPU, enforced
    with cgroup CPU weights, and each job pays its bid (pay-as-bid). On N CPUs a job receives
    min(1, share x N) CPUs (a serial job uses one CPU at most; the excess is not re-divided, as in the
    thesis), enforced by pinning jobs to CPUs, CPU quotas and weights. Every --every seconds a table
    shows each job's last bid and CPUs (share), the rule's fraction of the jobs' CPU time (mean over
    the table's periods), the measured fraction its cgroup used, and what it has paid so far.
    """
    import numpy as np

    from marketsched.behaviour.learning import ZIC, QLearning, make_bidder
    from marketsched.live.share import FixedBids, ShareMarket

    if ncpus > 1:
        if host is not None:
            raise click.UsageError("--host names one CPU; --cpus N shares the first N CPUs this process may use")
        mine = sorted(os.sched_getaffinity(0))
        if len(mine) < ncpus:
            raise click.BadParameter(f"{ncpus} CPUs asked for, this process may use {len(mine)} ({mine})",
                                     param_hint="--cpus")
        pool: int | list[int] = mine[:ncpus]
    else:
        pool = min(os.sched_getaffinity(0)) if host is None else host
    agent: FixedBids | ZIC | QLearning
    if bidder == "fixed":
        if bids is None:
            raise click.UsageError("--bidder fixed needs --bids (one bid per job)")
        bid_list = _number_list(bids, "--bids")
        vals = bid_list if values is None else _number_list(values, "--values")
        try:
            agent = FixedBids(bid_list)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--bids") from None
    else:
        if values is None:
            raise click.UsageError(f"--bidder {bidder} needs --values (one value per job)")
        if bids is not None:
            raise click.UsageError(f"--bids is for --bidder fixed; --bidder {bidder} bids from --values")
        vals = _number_list(values, "--values")
        try:
            agent = make_bidder(bidder, vals)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--values") from None
    books = _share_books(data, users, books_name, rule, len(vals), len(pool) if isinstance(pool, list) else 1)
    try:
        mk = ShareMarket(pool, rule, agent, vals, interval=interval, seed=seed, enforcement=enforcement, books=books)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    n = len(vals)
    seen = [0]  # rounds already shown

    def table(t: float, period: float, cpu_s, measured) -> None:
        _, last_bids, last_shares = mk.snapshot()
        rounds, mean, paid = mk.since(seen[0])
        seen[0] = rounds
        if mean.sum() > 0:  # the rule's fraction of the jobs' CPU time (on one CPU: the shares)
            mean = mean / mean.sum()
        many = len(mk.pool) > 1
        click.echo(f"t={t:.1f} s, period {rounds}; rule = mean share over the table's periods, measured = "
                   f"fraction of the CPU time over the last {period:.1f} s"
                   + ("; share = CPUs, rule and measured = fractions of the jobs' CPU time" if many else ""))
        click.echo(f"{'job':>4} {'bid':>8} {'share':>7} {'rule':>7} {'measured':>8} {'cpu s':>6} {'paid':>10}"
                   + (f" {'on':>5}" if many else ""))
        for i in range(n):
            k = int(mk.placement[i])
            on = "-" if k == -2 else "any" if k == -1 else str(mk.pool[k])
            click.echo(f"{i:>4} {last_bids[i]:>8g} {last_shares[i]:>7.4f} {mean[i]:>7.4f} {measured[i, 0]:>8.4f} "
                       f"{cpu_s[i, 0]:>6.2f} {paid[i]:>10.6f}" + (f" {on:>5}" if many else ""))
        click.echo(f"max |measured - rule|: {np.abs(measured[:, 0] - mean).max():.4f}")

    names = {"ps": "Proportional Share", "sh": "Sanghavi-Hajek"}
    server = None
    if serve_port is not None:
        from marketsched.live.share_page import ShareServer, ShareView

        view = ShareView(mk)
        try:
            server = ShareServer(view, "127.0.0.1", serve_port)
        except OSError as exc:
            raise click.BadParameter(f"cannot listen on 127.0.0.1:{serve_port}: {exc}", param_hint="--serve") from None
        server.serve_in_thread()

    def banner() -> str:
        text = (f"share: {names[rule]}, {n} jobs on CPU{'s' if len(mk.pool) > 1 else ''} "
                f"{','.join(map(str, mk.pool))}; enforcement {mk.enforcement}"
                f"{' (placement, quotas, weights)' if len(mk.pool) > 1 else ''}; "
                f"{bidder} bidders rebid every {interval:g} s for {duration:g} s")
        if server is not None:
            text += f"\npage: {server.url}/ (viewer token: {view.token})"
        return text

    try:
        _run_cpu_market(mk, f"the {names[rule]} market", banner, table, duration, every)
    finally:
        if server is not None:
            server.shutdown()
    if books is not None:
        try:
            checked = books.check()
        except AssertionError as exc:
            raise click.ClickException(f"the books do not add up: {exc}") from None
        click.echo(f"books {books_name!r}: {checked['periods']} periods, paid "
                   f"{', '.join(_money(p / 1e6) for p in checked['paid'])}; the ledger, the record and the "
                   "simulator agree")


def _share_books(data, users, name, rule, jobs, cpus=1):
    """The :class:`~marketsched.live.sharebooks.ShareBooks` of ``market share --data`` (None without it)."""
    if data is None:
        if users is not None:
            raise click.UsageError("--users needs --data (the market whose ledger the payments are booked in)")
        return None
    from marketsched.live.sharebooks import ShareBooks
    from marketsched.platform.ledger import Store

    if users is None:
        raise click.UsageError("--data needs --users (who owns and pays for each job)")
    owners = [u.strip() for u in users.split(",")]
    if len(owners) != jobs:
        raise click.BadParameter(f"{len(owners)} users for {jobs} jobs (one per job)", param_hint="--users")
    if not (data / "market.db").is_file():
        raise click.BadParameter(f"no market in {data} (no market.db): start one with `marketsched market serve`",
                                 param_hint="--data")
    try:
        serving = _alive(int(json.loads((data / READY_NAME).read_text())["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        serving = False
    if serving:  # the broker caches the balances: one writer of the ledger at a time
        raise click.UsageError(f"a broker is serving {data}: stop it first (it keeps the balances in memory)")
    try:
        return ShareBooks(Store(data), name, owners, rule, cpus)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _dlgm_submit(client, weight, runtime, node, cmd, as_json) -> None:
    if runtime is None:
        raise click.UsageError("a DLGM job needs --runtime (its reported run time, seconds)")
    body = {"weight": weight, "runtime": runtime, "command": cmd}
    if node is not None:
        body["node"] = node
    job = client.post("/api/dlgm/jobs", body)
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    paid = sum(x["amount"] for x in job["transfers"])
    click.echo(f"job {job['id']} {job['state']} on node {job['node']}; compensations {_money(paid)} to "
               f"{len(job['transfers'])} job(s)")


def _dlgm_list(jobs: list[dict]) -> None:
    """`market list` on a DLGM market: weight, reported run time, node, net payment."""
    click.echo(f"{'id':>5} {'user':<10} {'weight':>8} {'run s':>8} {'node':>4} {'state':<10} {'net paid':>10}  command")
    for j in jobs:
        click.echo(f"{j['id']:>5} {j['owner']:<10} {j['weight']:>8g} {j['runtime']:>8g} {j['node']!s:>4} "
                   f"{j['state']:<10} {j['payment']:>10.4f}  {j['command']}")


def _ees_submit(client, value, delay_cost, patience, runtime, cpus, cmd, as_json) -> None:
    if runtime is None:
        raise click.UsageError("an EES job needs --runtime (its declared run time, seconds)")
    body = {"value": value, "runtime": runtime, "command": cmd}
    for k, v in (("delay_cost", delay_cost), ("patience", patience), ("cpus", cpus)):
        if v is not None:
            body[k] = v
    job = client.post("/api/ees/jobs", body)
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    paid = sum((x["amount"] if x["from_account"].startswith("user:") else -x["amount"]) for x in job["payments"])
    click.echo(f"job {job['id']} {job['state']}; paid {_money(paid / 1e6)} so far" + (f"; {job['note']}" if job["note"] else ""))


def _echo_ees(q: dict) -> None:
    click.echo(f"{q['mechanism']} on {q['cpus']} CPU(s): {len(q['queue'])} queued, running {', '.join(map(str, q['running'])) or '-'}")
    if q["head_threshold"] is not None:
        click.echo(f"  the head runs if its value is at least {q['head_threshold']:g} (the delay it causes the others)")
    for x in q["queue"]:
        click.echo(f"  queued {x['id']}: value {x['value']:g}, delay cost {x['delay_cost']:g}/s, "
                   f"run time {x['runtime']:g} s, {x['cpus']} CPU(s)")
    for j in q["jobs"]:
        click.echo(f"  {j['id']:>5} {j['owner']:<10} {j['state']:<10} {j['note']}")


def _echo_nodes(p: dict) -> None:
    click.echo(f"{p['mechanism']}: {len(p['dlgm'])} node(s), each with its own queue (WSPT order)")
    for n in p["dlgm"]:
        r = n["running"]
        run = f"job {r['id']} ({r['owner']}, weight {r['weight']:g}) until t={r['ends']:.1f}" if r else "idle"
        queue = ", ".join(f"{x['id']} ({x['owner']}, {x['ratio']:g}/s)" for x in n["queue"]) or "-"
        host = f" (Slurm node {n['host']})" if "host" in n else ""
        click.echo(f"  node {n['node']}{host}: {run}; queue: {queue}")


@market.command("quote")
@click.option("--bid", "weight", required=True, type=float, help="The job's weight: bid per second of waiting.")
@click.option("--runtime", required=True, type=float, help="The reported run time, seconds.")
@click.option("--json", "as_json", is_flag=True)
@client_options
def quote(weight, runtime, as_json, client) -> None:
    """DLGM market: every node's tentative completion time, payment (compensations to the jobs
    the job would overtake) and utility -weight*completion - payment, for a job submitted now;
    best node first (the one `market submit --runtime` takes unless --node says otherwise)."""
    from urllib.parse import urlencode

    q = client.get("/api/dlgm/quote?" + urlencode({"weight": repr(weight), "runtime": repr(runtime)}))
    if as_json:
        click.echo(json.dumps(q, indent=2))
        return
    click.echo(f"{'node':>4} {'completion':>11} {'payment':>12} {'utility':>13}  (t={q['t']:.1f})")
    for r in q["nodes"]:
        click.echo(f"{r['node']:>4} {r['completion']:>11.3f} {r['payment']:>12.6f} {r['utility']:>13.6f}")


market.add_command(_ees_command)  # EES and relaxed EES (marketsched.live.ees_cli)


# the exchange's names for the same commands (one command line for both: docs/architecture.md)
market.add_command(user_token, "token")  # exchange token
market.add_command(price, "status")  # exchange status


def main() -> None:  # pragma: no cover - `python -m marketsched.live.cli`
    market(prog_name=os.path.basename(sys.argv[0]))


if __name__ == "__main__":  # pragma: no cover
    main()
