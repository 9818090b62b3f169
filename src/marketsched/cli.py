"""The ``marketsched`` command line."""

from __future__ import annotations

import time
from pathlib import Path

import click

from marketsched.scenario import MECHANISMS, PRICINGS, VALUE_MODELS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="marketsched")
def main() -> None:
    """Market-based scheduling for distributed computing: simulate, reproduce, serve."""


def workload_options(f):
    """Options shared by every command that builds a workload."""
    opts = [
        click.option("--trace", default=None, metavar="NAME|PATH",
                     help="Trace name (see `marketsched traces list`) or SWF path; default: built-in synthetic workload."),
        click.option("--synthetic-jobs", default=5000, show_default=True, type=click.IntRange(min=1),
                     help="Jobs in the built-in workload."),
        click.option("--synthetic-nodes", default=64, show_default=True, type=click.IntRange(min=1),
                     help="Processors of the built-in workload's machine."),
        click.option("--jobs", default=None, type=click.IntRange(min=1), help="Keep only the first N jobs."),
        click.option("--split", is_flag=True, help="Split parallel jobs into serial jobs (needed by the market mechanisms)."),
        click.option("--capacity", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
                     help="Fraction of the machine's processors to use (e.g. 0.75)."),
        click.option("--values", "value_model", default="bimodal", show_default=True, type=click.Choice(VALUE_MODELS),
                     help="Model of the jobs' true values."),
        click.option("--seed", default=1, show_default=True, type=int, help="Seed of the value draws."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _build(trace, synthetic_jobs, synthetic_nodes, jobs, split, capacity):
    from marketsched.scenario import WorkloadSpec

    spec = WorkloadSpec(trace=trace, synthetic_jobs=synthetic_jobs, synthetic_nodes=synthetic_nodes, jobs=jobs,
                        split=split, capacity=capacity)
    try:
        workload = spec.build()
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    for note in spec.notes:
        click.echo(note, err=True)
    return workload


def _run_all(workload, runs, values):
    """Run (mechanism, pricing) pairs with a progress bar; return summary rows."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from marketsched.analysis.metrics import summarize
    from marketsched.scenario import MARKET_MECHANISMS, PRICED_MECHANISMS, simulate

    rows, records = [], {}
    with Progress(TextColumn("{task.description:<12}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), transient=True) as bar:
        for mech, pricing in runs:
            task = bar.add_task(f"{mech}/{pricing or '-'}", total=len(workload))
            t0 = time.perf_counter()
            market = mech in MARKET_MECHANISMS
            rec = simulate(workload, mech, values if market else None, pricing or "kth",
                           progress=lambda done, total, task=task: bar.update(task, completed=done))
            seconds = time.perf_counter() - t0
            row = {"mechanism": mech, "pricing": pricing if mech in PRICED_MECHANISMS else "-",
                   **summarize(workload, rec, values), "seconds": seconds}
            if not market:
                for k in ("revenue", "revenue_per_twft", "mean_utility"):
                    row[k] = float("nan")
            rows.append(row)
            records[(mech, pricing)] = rec
    return rows, records


def _print_table(rows, title):
    from rich.console import Console
    from rich.table import Table

    cols = [("mechanism", "mechanism", "{}"), ("pricing", "pricing", "{}"), ("completed", "completed", "{:,}"),
            ("mean_wait", "wait (h)", "h"), ("mean_bsd", "mean BSD", "{:.2f}"), ("ssj_share", "SSJ %", "%"),
            ("utilization", "util %", "%"), ("preemptions", "preempt", "{:,}"), ("revenue", "revenue", "{:.4g}"),
            ("twft", "TWFT", "{:.4g}"), ("revenue_per_twft", "rev/TWFT", "{:.3f}"),
            ("mean_utility", "mean utility", "{:.4g}"), ("seconds", "time (s)", "{:.2f}")]
    table = Table(title=title)
    for _, head, _ in cols:
        table.add_column(head, justify="right")
    for row in rows:
        cells = []
        for key, _, fmt in cols:
            v = row.get(key)
            if isinstance(v, float) and abs(v) < 1e-6:
                v = 0.0  # float noise: DLGM's payments are transfers between jobs and sum to zero
            if v is None or (isinstance(v, float) and v != v):
                cells.append("-")
            elif fmt == "h":
                cells.append(f"{v / 3600:.2f}")
            elif fmt == "%":
                cells.append(f"{100 * v:.1f}")
            else:
                cells.append(fmt.format(v))
        table.add_row(*cells)
    console = Console()
    if console.width < 150:
        console = Console(width=150)  # pipes and CI logs: do not squeeze the table to 80 columns
    console.print(table)


@main.command()
@workload_options
@click.option("--mechanism", default="hb", show_default=True, type=click.Choice(MECHANISMS), help="Allocation rule.")
@click.option("--pricing", default="kth", show_default=True, type=click.Choice(PRICINGS),
              help="Payment scheme of hb, nphb, wspt, wsept (DLGM and P-DLGM pay by their own rule).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write per-job results to this .parquet or .csv file.")
def simulate(trace, synthetic_jobs, synthetic_nodes, jobs, split, capacity, value_model, seed, mechanism, pricing,
             out_path):
    """Simulate one mechanism on a workload and print a summary.

    Example: marketsched simulate --trace LPC-EGEE-2004-1.2-cln --capacity 0.75 --mechanism hb --pricing kth
    """
    from marketsched.analysis.metrics import job_table
    from marketsched.scenario import true_values

    if out_path is not None and out_path.suffix not in (".parquet", ".csv"):
        raise click.BadParameter("the file name must end in .parquet or .csv", param_hint="--out")
    workload = _build(trace, synthetic_jobs, synthetic_nodes, jobs, split, capacity)
    values = true_values(workload, value_model, seed)
    try:
        rows, records = _run_all(workload, [(mechanism, pricing)], values)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_table(rows, f"{workload.name}: {len(workload):,} jobs on {workload.capacity} processors, truthful bids")
    if out_path is not None:
        table = job_table(workload, records[(mechanism, pricing)], true_value=values, bid=values)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        table.to_parquet(out_path) if out_path.suffix == ".parquet" else table.to_csv(out_path, index=False)
        click.echo(f"per-job results: {out_path}")


@main.command()
@workload_options
@click.option("--mechanisms", default="hb,nphb,wspt,wsept,dlgm,pdlgm,fcfs,easy", show_default=True,
              help="Comma-separated mechanisms to compare.")
@click.option("--pricings", default="kth,first", show_default=True, help="Comma-separated payment schemes.")
def compare(trace, synthetic_jobs, synthetic_nodes, jobs, split, capacity, value_model, seed, mechanisms, pricings):
    """Compare mechanisms on one workload (the main job; default: the built-in workload).

    Every mechanism sees the same jobs with the same true values (common random numbers);
    bids are truthful.
    """
    from marketsched.scenario import PRICED_MECHANISMS, true_values

    mechs = [m.strip() for m in mechanisms.split(",") if m.strip()]
    prices = [p.strip() for p in pricings.split(",") if p.strip()]
    for m in mechs:
        if m not in MECHANISMS:
            raise click.BadParameter(f"unknown mechanism {m!r}; choose from {', '.join(MECHANISMS)}", param_hint="--mechanisms")
    for p in prices:
        if p not in PRICINGS:
            raise click.BadParameter(f"unknown pricing {p!r}; choose from {', '.join(PRICINGS)}", param_hint="--pricings")
    workload = _build(trace, synthetic_jobs, synthetic_nodes, jobs, split, capacity)
    values = true_values(workload, value_model, seed)
    runs = [(m, p) for m in mechs for p in (prices if m in PRICED_MECHANISMS else [None])]
    try:
        rows, _ = _run_all(workload, runs, values)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    _print_table(rows, f"{workload.name}: {len(workload):,} jobs on {workload.capacity} processors, "
                       f"{value_model} values (seed {seed}), truthful bids")
    if {"fcfs", "easy"} <= set(mechs) and bool((workload.procs == 1).all()):
        click.echo("note: every job is serial, so EASY has nothing to backfill and equals FCFS; "
                   "try --trace SDSC-SP2-1998-4.2-cln --mechanisms fcfs,easy")


@main.command()
@click.argument("name", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the report (default: results/NAME).")
@click.option("--quick", is_flag=True, help="Reduced grid that finishes in about a minute.")
@click.option("--seeds", type=click.IntRange(min=1), default=None, help="Number of seeds (default: the experiment's own).")
@click.option("--executor", type=click.Choice(["process", "serial", "ray"]), default=None,
              help="Where grid cells run: local processes (default), in this process, or a Ray cluster "
                   "(pip install ray). For experiments built on the grid runner.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Local worker processes (default: cores).")
@click.option("--report-only", is_flag=True,
              help="Simulate nothing: rewrite the report from the stored results (--results).")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Stored results to read (default: OUT/results); a run stores them there.")
def reproduce(name: str | None, out_dir: Path | None, quick: bool, seeds: int | None, executor: str | None,
              workers: int | None, report_only: bool, results_dir: Path | None) -> None:
    """Reproduce a paper's experiments and write a report (list them without NAME).

    A run stores its results in OUT/results and writes OUT/report.md from them;
    `--report-only` rewrites the report from stored results without simulating.
    """
    import inspect

    from marketsched import experiments

    found = experiments.available()
    if name is None:
        for key, module in found.items():
            click.echo(f"{key:20s} {getattr(module, 'TITLE', '')}")
        return
    if name not in found:
        raise click.BadParameter(f"unknown experiment {name!r}; known: {', '.join(found) or 'none'}", param_hint="NAME")
    out_dir = out_dir or Path("results") / name
    module = found[name]
    if report_only:
        for flag, given in (("--quick", quick), ("--seeds", seeds), ("--executor", executor), ("--workers", workers)):
            if given:
                raise click.BadParameter(f"{flag} chooses what to simulate; --report-only simulates nothing",
                                         param_hint=flag)
        results_dir = results_dir or out_dir / "results"
        if not results_dir.is_dir():
            raise click.BadParameter(f"no stored results in {results_dir} (run `marketsched reproduce {name}` first, "
                                     "or point --results at a run's results folder)", param_hint="--results")
        try:
            path = module.write_report(results_dir, out_dir)
        except FileNotFoundError as exc:
            raise click.ClickException(f"{results_dir} is missing a stored result of {name}: {exc}") from exc
        click.echo(f"report: {path}")
        return
    if results_dir is not None:
        raise click.BadParameter("a run stores its results in OUT/results; --results goes with --report-only",
                                 param_hint="--results")
    extra = {k: v for k, v in (("executor", executor), ("workers", workers)) if v is not None}
    accepted = inspect.signature(module.run).parameters
    for key in extra:
        if key not in accepted:
            raise click.BadParameter(f"experiment {name!r} does not run on the grid runner; it takes no --{key}",
                                     param_hint=f"--{key}")
    path = module.run(out_dir=out_dir, quick=quick, seeds=seeds, **extra)
    click.echo(f"report: {path}")


def _register_groups() -> None:
    from marketsched.live.cli import market
    from marketsched.workloads.cli import traces

    main.add_command(traces)
    main.add_command(market)


_register_groups()

if __name__ == "__main__":
    main()
