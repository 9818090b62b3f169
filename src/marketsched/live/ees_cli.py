"""``marketsched market ees``: an EES or relaxed-EES market (:class:`~marketsched.live.ees.EESMarket`)
run in the foreground on this machine's processes, from a file of submissions.

The same market as ``market serve --mechanism ees|relaxed-ees``
(:mod:`marketsched.live.ees_service`), without the server: for a file of submissions. This
command runs the market for the jobs of a file (each submitted at its time), prints every
decision as it is taken (the head, run or discarded, its value against the delay it causes, the
payments), then each job's outcome, the balances, and the replay of the recorded run through the
simulator. The market's database stays in ``--data``: run the command again on it and the market
restarts (the recorded decisions replayed and checked) before the new file's jobs are submitted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

FIELDS = {"at", "user", "value", "delay_cost", "runtime", "cpus", "command"}


def read_jobs(path: Path) -> list[dict]:
    """The submissions of a JSON-lines file: ``at`` (seconds after the start), ``user``,
    ``value``, ``delay_cost`` (per second of waiting), ``runtime`` (declared, seconds), ``cpus``
    (optional), ``command``; sorted by ``at`` (stable). A bad line is refused naming its number."""
    jobs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            job = json.loads(line)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"line {n}: not JSON ({exc.msg})", param_hint="JOBS") from None
        if not isinstance(job, dict) or not {"at", "user", "value", "delay_cost", "runtime", "command"} <= set(job) \
                or not set(job) <= FIELDS:
            raise click.BadParameter(f"line {n}: a submission is an object with at, user, value, delay_cost, "
                                     "runtime, command and optionally cpus", param_hint="JOBS")
        at = job["at"]
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
            raise click.BadParameter(f"line {n}: at must be a number of seconds >= 0, got {at!r}", param_hint="JOBS")
        jobs.append(job)
    return sorted(jobs, key=lambda j: j["at"])


def echo_decision(d: dict) -> None:
    pays = ", ".join(f"job {j} {p:+.6f}" for j, p in zip(d["jobs"], d["payments"]))
    outcome = "runs" if d["runs"] else "discarded"
    click.echo(f"t={d['t']:.3f} job {d['jobs'][0]} {outcome}: value {d['value']:g} vs delay {d['externality']:g} "
               f"({len(d['jobs'])} queued); payments: {pays}")


@click.command("ees")
@click.argument("jobs", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--data", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="The market's folder (database, jobs' folders); an existing one is restarted.")
@click.option("--mechanism", default="ees", show_default=True, type=click.Choice(["ees", "relaxed-ees"]),
              help="ees: one job at a time holds every CPU (Mutz 2008, ch. 4); relaxed-ees: jobs ask CPUs and "
                   "are packed (ch. 6).")
@click.option("--cpus", default=2, show_default=True, type=click.IntRange(1, 10_000), help="The machine's CPUs.")
@click.option("--value-prior", nargs=2, type=float, default=(0.0, 100.0), show_default=True,
              help="LOW HIGH of the declared uniform prior of the values.")
@click.option("--delay-prior", nargs=2, type=float, default=(0.0, 1.0), show_default=True,
              help="LOW HIGH of the declared uniform prior of the delay costs per second.")
@click.option("--draws", default=200, show_default=True, type=click.IntRange(1, 10**6),
              help="Monte Carlo draws per expectation of the payments.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed of the draws.")
@click.option("--deposit", default=100.0, show_default=True, type=float,
              help="Deposit of each user of the file who is new to the market.")
def ees(jobs, data, mechanism, cpus, value_prior, delay_prior, draws, seed, deposit) -> None:
    """EES or relaxed EES (Mutz 2008) as a running market for the submissions in JOBS.

    JOBS has one JSON object per line: {"at": 0.5, "user": "alice", "value": 40, "delay_cost":
    0.2, "runtime": 30, "command": "..."} (and "cpus" for relaxed-ees). Each is submitted at its
    time; at each decision the queue's head runs or is discarded by the simulator's rule and every
    queued job pays its expected-externality payment; a job is stopped at its declared run time.
    """
    from marketsched.live.ees import EESConfig, EESMarket, simulate_recorded
    from marketsched.platform.clock import WallClock
    from marketsched.platform.executor import LocalExecutor
    from marketsched.platform.files import data_folder
    from marketsched.platform.ledger import Store
    from marketsched.platform.validation import MarketError

    todo = read_jobs(jobs)
    try:
        config = EESConfig(mechanism, cpus, tuple(value_prior), tuple(delay_prior), draws, "cached", seed).check()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    folder = data_folder(data)
    store = Store(folder)
    epoch = store.get_meta("epoch")
    if epoch is None:
        clock = WallClock()
        store.set_meta("epoch", repr(clock.epoch))
    else:
        clock = WallClock(float(epoch))
    ex = LocalExecutor(folder / "jobs")
    try:
        m = EESMarket(store, config, clock, ex)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    known = {name for name, _ in store.users()}
    for name in sorted({j["user"] for j in todo} - known):
        try:
            m.add_user(name, deposit)
        except MarketError as exc:
            raise click.BadParameter(str(exc), param_hint="JOBS") from None
    shown = max((d["id"] for d in m.decisions()), default=0)
    start = clock()
    try:
        while True:
            now = clock()
            while todo and start + todo[0]["at"] <= now:
                j = todo.pop(0)
                try:
                    got = m.submit(j["user"], j["value"], j["delay_cost"], j["runtime"], j["command"], j.get("cpus"))
                    click.echo(f"t={got['submit_t']:.3f} job {got['id']} submitted by {j['user']}")
                except MarketError as exc:
                    click.echo(f"refused ({exc.status}): {j['user']}'s job at {j['at']:g} s: {exc}")
            m.tick()
            for d in m.decisions(after=shown):
                echo_decision(d)
                shown = d["id"]
            active = any(s in ("queued", "planned", "running") for s in m.state.values())
            if not todo and not active:
                break
            wake = min(m.next_event(), start + todo[0]["at"] if todo else math.inf)
            ex.wait(min(max(wake - clock(), 0.0), 0.2))
    finally:
        for key in list(ex.procs):
            ex.kill(key)
    click.echo("jobs:")
    for row in store.jobs():
        click.echo(f"  {row['id']:>4} {row['owner']:<10} {row['state']:<10} {row['note']}")
    books = store.check_books()
    click.echo("balances: " + ", ".join(f"{name} {m.balance(name) / 1e6:.6f}" for name, _ in store.users())
               + f"; revenue {books['revenue'] / 1e6:.6f} (the payments' rounding)")
    try:
        sim_policy, _ = simulate_recorded(m)
    except ValueError as exc:
        click.echo(f"replay through the simulator: not possible ({exc})")
        return
    sim = [(d.job_ids.tolist(), d.runs, d.payments.tolist()) for _, _, d in sim_policy.ledger.rows]
    live = [(d["rows"], d["runs"], d["payments"]) for d in m.decisions()]
    if sim == live:
        click.echo(f"replay through the simulator: the same {len(live)} decisions and payments")
    else:
        k = next((i for i, (a, b) in enumerate(zip(sim, live)) if a != b), min(len(sim), len(live)))
        click.echo(f"replay through the simulator: decision {k} differs (two submissions at one time, or a stop "
                   "the market noticed after a later event; docs/live_market.md)")
