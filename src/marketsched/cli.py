"""The ``marketsched`` command line.

Start-up is kept light: NumPy, pandas and the engine are imported inside the commands that
use them, and option help naming the value, estimate, deadline and reliability models looks
the names up only when shown (:class:`_NamesOption`), so ``marketsched --help`` imports none
of them. The command line sets ``OPENBLAS_NUM_THREADS=1`` when it is unset (see below); the
library, imported from Python, leaves the environment alone.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

# One BLAS thread per process unless the user says otherwise: marketsched runs in parallel by
# processes (grid workers, executors), never by threads inside NumPy, and a process that starts
# OpenBLAS's thread pool pays 30-50 ms of CPU for threads it never uses. Before NumPy's import.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click

from marketsched.mechanisms.online.pricing import SCHEMES

PRICINGS = tuple(SCHEMES)


def _names(module: str, attr: str):
    """A function giving the keys of ``module.attr`` (a registry of models), imported when called."""
    return lambda: list(getattr(importlib.import_module(module), attr))


class _NamesChoice(click.Choice):
    """A :class:`click.Choice` whose choices come from ``names()``, called when first needed."""

    def __init__(self, names) -> None:
        self._names = names
        self._choices: tuple[str, ...] | None = None
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:
        if self._choices is None:
            self._choices = tuple(self._names())
        return self._choices

    @choices.setter
    def choices(self, value) -> None:
        self._choices = tuple(value)


class _NamesOption(click.Option):
    """An option whose help names ``names()`` (``{names}`` in its help), looked up when shown;
    ``choice=True`` also makes them its only accepted values."""

    def __init__(self, *args, names, choice: bool = False, **kwargs) -> None:
        self._help_template = kwargs.pop("help")
        self._names = names
        if choice:
            kwargs["type"] = _NamesChoice(names)
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self._help_template.format(names=", ".join(self._names()))

    @help.setter
    def help(self, value) -> None:  # click sets it at construction; the template stands
        pass


class _Group(click.Group):
    """The main group; the command groups of other packages are imported only when used:
    ``simulate`` never imports the live market's HTTP client, and ``--help`` lists them by
    their short help kept here (click's: the first sentence; a test holds it equal to theirs)."""

    lazy = {
        "traces": ("marketsched.workloads.cli", "traces",
                   "Known Parallel Workloads Archive traces: list, download, locate."),
        "market": ("marketsched.live.cli", "market",
                   "The live market: a MOSIX-style market sharing this machine among users (Shudler et al."),
        "exchange": ("marketsched.exchange.cli", "exchange",
                     "A live grid exchange: providers, requests and offers, periodic clearing (Stößer 2009)."),
    }

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx, cmd_name):
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr, _ = self.lazy[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx, formatter) -> None:
        """Click's list of commands, a group not yet imported standing in by its kept help."""
        commands = []
        for name in self.list_commands(ctx):
            if name in self.lazy and name not in self.commands:
                commands.append((name, click.Command(name, help=self.lazy[name][2])))
            elif (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden:
                commands.append((name, cmd))
        limit = formatter.width - 6 - max(len(name) for name, _ in commands)
        with formatter.section("Commands"):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in commands])


_DEBUG = {"on": False}


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A plugin that did not load is one line (``warning: ...``), not Python's source-line warning."""
    if category.__name__ == "PluginWarning":
        click.echo(f"warning: {message}", err=True)
    else:
        _PYTHON_SHOWWARNING[0](message, category, filename, lineno, file, line)


_PYTHON_SHOWWARNING: list = []  # Python's own warnings.showwarning, kept when the command line replaces it


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="marketsched")
@click.option("--debug", is_flag=True, help="Show the full traceback when a mechanism (a plugin's, say) fails.")
def main(debug: bool = False) -> None:
    """Market-based scheduling for distributed computing: simulate, reproduce, serve."""
    import warnings

    _DEBUG["on"] = debug or os.environ.get("MARKETSCHED_DEBUG", "") not in ("", "0")
    if click.get_current_context().invoked_subcommand != "simulate":
        _started()  # simulate ends its start-up once its workload is built
    if warnings.showwarning is not _show_warning:
        _PYTHON_SHOWWARNING[:] = [warnings.showwarning]
        warnings.showwarning = _show_warning


def _mechanism_failed(name: str, exc: BaseException):
    """Turn an error raised while running mechanism ``name`` into a one-line ClickException: naming
    the plugin (distribution and version) when it is one, the message alone for ValueError and
    RuntimeError (a bad input, a missing compiled kernel). With ``--debug``, or for another error
    of a built-in mechanism (a bug), the exception goes on with its traceback."""
    if _DEBUG["on"]:
        raise exc
    from marketsched.results import plugin_of

    try:
        plugin = plugin_of(name)
    except ValueError:
        plugin = None
    first = (str(exc).strip().splitlines() or [""])[0]
    if plugin is not None:
        raise click.ClickException(
            f"mechanism {name!r} from the plugin {plugin['distribution']} {plugin['version'] or ''} failed: "
            f"{type(exc).__name__}: {first} (marketsched --debug ... shows the traceback)") from None
    if isinstance(exc, (ValueError, RuntimeError)):
        raise click.ClickException(str(exc)) from None
    raise exc


def _engine_notice() -> None:
    """A one-line notice when the compiled kernels are missing and the engine silently takes the Python path."""
    from marketsched.engine import compiled
    from marketsched.results import missing_kernels

    try:
        mode = compiled.mode()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if mode == "auto" and missing_kernels():
        click.echo("note: the compiled kernels are not built (no C compiler at install?): simulations take the "
                   "Python path, tens of times slower; reinstall with a compiler, or set MARKETSCHED_ENGINE=python "
                   "to hide this note", err=True)
    elif mode == "compiled" and (gone := missing_kernels()):
        raise click.ClickException(f"MARKETSCHED_ENGINE=compiled but the compiled kernels {', '.join(gone)} are not "
                                   "built: reinstall with a C compiler and Python headers (pip install -e .), or "
                                   "unset MARKETSCHED_ENGINE")


def _warn_idle(jobs, runs) -> None:
    """Warn about a run that started no job (a policy that never calls ``sim.start``, say)."""
    import numpy as np

    for r in runs:
        if len(jobs.workload) and not np.isfinite(r.records.first_start).any():
            states = ", ".join(f"{n:,} {s}" for s, n in r.records.counts().items() if n)
            click.echo(f"warning: {r.label} started none of the {len(jobs.workload):,} jobs ({states})", err=True)


def workload_options(f):
    """Options shared by every command that builds a workload and its jobs."""
    attributes = "marketsched.workloads.attributes"
    opts = [
        click.option("--trace", default=None, metavar="NAME|PATH",
                     help="Trace name (see `marketsched traces list`), SWF path or Batsim workload (.json); "
                          "default: built-in synthetic workload."),
        click.option("--synthetic-jobs", default=5000, show_default=True, type=click.IntRange(min=1),
                     help="Jobs in the built-in workload."),
        click.option("--synthetic-nodes", default=64, show_default=True, type=click.IntRange(min=1),
                     help="Processors of the built-in workload's machine."),
        click.option("--jobs", default=None, type=click.IntRange(min=1), help="Keep only the first N jobs."),
        click.option("--split", is_flag=True, help="Split parallel jobs into serial jobs (needed by the market mechanisms)."),
        click.option("--capacity", default=1.0, show_default=True,
                     type=click.FloatRange(min=0, max=1, min_open=True),
                     help="Fraction of the machine's processors to use, 0 < f <= 1 (e.g. 0.75)."),
        click.option("--whole-seconds", is_flag=True,
                     help="Round submit and run times up to whole seconds (the share markets bid once a second)."),
        click.option("--estimates", default="trace", show_default=True, metavar="MODEL", cls=_NamesOption,
                     names=_names(attributes, "ESTIMATES"),
                     help="Run-time estimates: {names} (e.g. badness:f=3); see docs/workloads.md."),
        click.option("--values", "value_model", default=None, cls=_NamesOption,
                     names=_names("marketsched.workloads.values", "MODELS"), choice=True,
                     help="Model of the jobs' true values: {names} (default: bimodal-1 on the built-in workload, "
                          "bimodal on a trace)."),
        click.option("--deadlines", default="patience", show_default=True, metavar="MODEL", cls=_NamesOption,
                     names=_names(attributes, "DEADLINES"), help="Deadline model: {names} (e.g. slack:factor=5)."),
        click.option("--reliability", default="none", show_default=True, metavar="MODEL", cls=_NamesOption,
                     names=_names(attributes, "RELIABILITY"),
                     help="Minimum provider reliability each job asks for: {names}."),
        click.option("--seed", default=1, show_default=True, type=int,
                     help="Seed of the value, deadline, estimate and reliability draws."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _build(opts: dict, forms: bool = True):
    """The scenario of the workload options and its jobs (notes to stderr); click errors on bad input.

    Without a trace: the built-in scenario (:meth:`marketsched.scenario.Scenario.builtin`, each
    mechanism in its paper's form); ``forms=False`` keeps the serial synthetic workload with
    ``bimodal`` values that the audit's documented findings were measured on."""
    from marketsched.scenario import Scenario, WorkloadSpec
    from marketsched.workloads.attributes import parse_model

    try:
        for kind in ("estimates", "deadlines", "reliability"):
            parse_model(kind, opts[kind])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"--{kind}") from None
    transforms = dict(jobs=opts["jobs"], split=opts["split"], capacity=opts["capacity"],
                      whole_seconds=opts["whole_seconds"], estimates=opts["estimates"], estimates_seed=opts["seed"])
    models = dict(deadlines=opts["deadlines"], reliability=opts["reliability"])
    if opts["trace"] is None and forms:  # every mechanism runs the built-in workload, each in its paper's form
        scenario = Scenario.builtin(opts["synthetic_jobs"], opts["synthetic_nodes"], opts["seed"], **transforms,
                                    **models, values=opts["value_model"] or "bimodal-1")
    else:
        spec = WorkloadSpec(trace=opts["trace"], synthetic_jobs=opts["synthetic_jobs"],
                            synthetic_nodes=opts["synthetic_nodes"], **transforms)
        scenario = Scenario(spec, opts["value_model"] or "bimodal", opts["seed"], **models)
    spec = scenario.workload
    try:
        jobs = scenario.build()
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    for note in spec.notes:
        click.echo(note, err=True)
    return scenario, jobs


def _params(items, where: str = "--param") -> list[tuple[str | None, str, str]]:
    """``KEY=VALUE`` or ``NAME.KEY=VALUE`` items as ``(name or None, key, value)``."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE (or MECHANISM.KEY=VALUE), got {item!r}", param_hint=where)
        name, dot, k = key.strip().rpartition(".")
        out.append((name if dot else None, k, value))
    return out


def _run_all(jobs, runs, events: bool = False, on_done=None, on_fail=None):
    """Simulate ``(mechanism, params)`` pairs in turn with a progress bar that shows each one's
    jobs per second so far (a slow run shows as slow, not hung); returns the runs.

    ``on_done(run)`` is called as each run finishes. With ``on_fail(failure)`` a run that raises
    (a plugin's bug, a mechanism that does not fit) becomes a :class:`_Failure` handed to it and
    the next one runs; without it the exception propagates. Ctrl-C (``KeyboardInterrupt``)
    always propagates, after the runs finished so far went to ``on_done``."""
    from marketsched.mechanisms.registry import get
    from marketsched.progress import BAR, ELAPSED, Progress, rate
    from marketsched.scenario import in_form, run

    out = []
    with Progress("{task.description:<18}", BAR, "{task.percentage:>3.0f}%", ELAPSED, rate("jobs"),
                  transient=True, heartbeat=True) as bar:
        for name, params in runs:
            try:
                formed = in_form(jobs, name)[0]  # the jobs in the mechanism's form: the bar counts them
                task = bar.add_task(get(name).label(get(name).resolve(params)), total=len(formed.workload))
                done = run(formed, name, params, events=events,
                           progress=lambda done, total, task=task: bar.update(task, completed=done))
            except Exception as exc:
                if on_fail is None:
                    raise
                on_fail(_Failure.of(name, params, exc))
                continue
            out.append(done)
            if on_done is not None:
                on_done(done)
    return out


@dataclass(frozen=True)
class _Failure:
    """A run of ``compare`` that raised: its mechanism, label, kind and why (one line)."""

    mechanism: str
    label: str
    kind: str
    why: str

    @classmethod
    def of(cls, name: str, params: dict, exc: BaseException) -> _Failure:
        from marketsched.mechanisms.registry import get

        m = get(name)
        try:
            label = m.label(m.resolve(params))
        except Exception:  # noqa: BLE001 - the label of a mechanism whose parameters fail: its name
            label = name
        text = " ".join(str(exc).split()) or "(no message)"
        return cls(name, label, m.kind, f"{type(exc).__name__}: {text}")


COLUMNS = [("label", "mechanism", "{}"), ("completed", "done", "{:,}"), ("mean_wait", "wait h", "h"),
           ("mean_bsd", "BSD", "{:.2f}"), ("ssj_share", "SSJ%", "%"), ("utilization", "util%", "%"),
           ("preemptions", "preempt", "{:,}"), ("revenue", "revenue $", "g"), ("twft", "TWFT $", "g"),
           ("mean_utility", "utility $", "g"), ("cpu_seconds", "CPU s", "s")]

LEGEND = """\
$        the unit of the jobs' true values and of payments (a priority market's value is $ per
         second of a job's flow time); the workload's values model sets its scale.
done     jobs that ran to the end, in the mechanism's form (listed under the legend when forms
         differ); the others were discarded (EES and relaxed EES: the head's value was below the
         delay it would cause the queue), rejected (Egg: no provider's price and completion time
         fit the job's bid) or dropped or killed (Egg: a crash, or not done by the completion time
         it was sold).
         EES is defined for jobs that hold the whole machine (Mutz (2008), chapter 4): on the
         built-in workload each job runs as wide as the machine for its processor-seconds / P (the
         'whole machine' form); on a trace, whose jobs keep their widths, it still runs one job at
         a time, so with serial jobs on P processors its util% is at most 100/P and most heads are
         discarded. Relaxed EES (chapter 6) packs jobs by their node counts.
         Egg's providers estimate a job's run time as its requested time: a job whose request does
         not end before its deadline, or whose falling bid is below every price by then, is
         rejected (on the built-in workload most long jobs, about three quarters of the work, hence
         its util%), and providers with static prices sell more than they finish in time and drop
         the rest (refunded).
wait h   mean hours from submission to first start (completed jobs).
BSD      bounded slowdown, flow time / max(run time, 60 s), mean over completed jobs
         (Shudler et al. (2010), Eq. 1); SSJ% = share of severely slowed-down jobs, BSD >= 5.
util%    processor-seconds of completed work / (processors x span from first submit to last end).
revenue  sum of all payments ($). DLGM and P-DLGM show 0: a job pays the jobs it overtakes, so every
         payment is a transfer between jobs and they sum to zero (Stößer (2009), section 5.3);
         EES's expected-externality payments also balance over the queue (Mutz (2008), eq. 4.4).
TWFT     total weighted flow time ($), sum of true value x flow time over completed jobs: the
         social cost the priority markets minimise (lower is better).
utility  mean per-job utility ($ per job) in the mechanism's own model, comparable within a kind
         only.
         Priority and compensation markets: -w x flow time - payment (Shudler et al. (2010),
         Eq. 3): negative by construction, as a job only loses (w per second until it ends, and
         its payment) and nothing rewards completion. Queue auctions: v - d x wait - payment with
         v = w x patience, d = w (Mutz (2008)); share markets: value x CPU-seconds received -
         payment (Stößer (2009)); Egg: value at the scheduled completion - price, 0 if not served.
         Share markets run every job from its release for its run time whatever its share, so
         their wait is 0 and BSD at most 1: the share shows in the utility.
CPU s    CPU seconds of the simulation."""


KIND_HEADINGS = {"priority market": "priority", "compensation market": "compensation",
                 "decentralized auction": "decentralized"}  # short: the default table fits 100 columns


def _summary_rows(jobs, runs, failed=()):
    """A row of metrics per run, then a row per :class:`_Failure` (``failed`` in its done column)."""
    from marketsched.mechanisms.registry import get
    from marketsched.results import summary_of

    rows = []
    for r in runs:
        m = get(r.mechanism)
        row = {"label": r.label, "kind": m.kind, **summary_of(jobs, r), "cpu_seconds": r.cpu_seconds}
        if not m.market:
            for k in ("revenue", "mean_utility"):
                row[k] = float("nan")
        rows.append(row)
    rows += [{"label": f.label, "kind": f.kind, "completed": "failed"} for f in failed]
    return rows


def _cell(v, fmt: str) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and abs(v) < 1e-6:
        v = 0.0  # float noise: payments that are transfers between jobs sum to zero
    if fmt == "h":
        return f"{v / 3600:.2f}"
    if fmt == "%":
        return f"{100 * v:.1f}"
    if fmt == "g":
        return f"{v:.3g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")
    if fmt == "s":  # CPU seconds in at most 5 characters below 100 s: the compiled kernels show as <0.01
        return "<0.01" if v < 0.01 else f"{v:.2g}" if v < 10 else f"{v:,.0f}"
    return fmt.format(v)


def _console():
    from rich.console import Console

    from marketsched.terminal import WIDTH

    console = Console()
    if console.width < WIDTH:
        console = Console(width=WIDTH)  # pipes and CI logs: 100 columns, as the table and legend are laid out
    return console


def _results_table(rows, title):
    """The summary table of :func:`_summary_rows`: a section per kind (headed when there are several)."""
    from marketsched.mechanisms.registry import KINDS
    from marketsched.terminal import TextTable

    columns = [(head, "left" if i == 0 else "right", 13 if i == 0 else len(head)) for i, (_, head, _) in enumerate(COLUMNS)]
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    sections = [([KIND_HEADINGS.get(kind, kind)] if len(kinds) > 1 else [])
                + [[_cell(row.get(key), fmt) for key, _, fmt in COLUMNS] for row in rows if row["kind"] == kind]
                for kind in kinds]
    return TextTable(title, columns, sections)


def _print_table(rows, title, legend: bool = False, skipped=(), failed=(), stopped=()):
    """The summary table, what failed (``failed``: :class:`_Failure`), what was not run and why
    (``skipped``: ``(name, reason)``), what an interruption left out (``stopped``: labels), and
    the legend: drawn by rich on a terminal, as plain text elsewhere (the same layout; rich is
    not imported)."""
    import textwrap

    from marketsched.terminal import rich_console

    table = _results_table(rows, title)
    notes = []
    if failed:
        notes.append("failed (the other rows are complete):")
        notes += [textwrap.fill(f"{f.label}: {f.why}", width=100, initial_indent="  ", subsequent_indent="      ")
                  for f in failed]
    if stopped:
        notes.append(textwrap.fill("interrupted (Ctrl-C): not finished: " + ", ".join(stopped), width=100,
                                   subsequent_indent="  "))
    if skipped:
        notes.append("not run (what is missing, and how to get it):")
        notes += [textwrap.fill(f"{name}: {reason}", width=100, initial_indent="  ", subsequent_indent="      ")
                  for name, reason in skipped]
    if legend:
        notes.append(LEGEND)
    console = rich_console()
    if console is None:
        click.echo(table.plain() + "".join(note + "\n" for note in notes), nl=False)
        return
    console.print(table.rich())
    for note in notes:
        console.print(note, highlight=False, markup=False)
def _write_outputs(scenario, jobs, runs, out_path, events_path, command: str, quiet: bool = False) -> None:
    """Write the runs' per-job results and event logs (``--out``, ``--events``), each file
    replaced whole (written beside, then renamed): an interruption leaves the previous one."""
    if (out_path is None and events_path is None) or not runs:
        return  # nothing to write: pandas is not even imported
    import pandas as pd

    from marketsched.results import job_table_of, metadata, write

    meta = metadata(scenario, runs, command)
    if out_path is not None:
        table = pd.concat([job_table_of(jobs, r) for r in runs], ignore_index=True)
        _replace(write, table, out_path, meta)
        if not quiet:
            click.echo(f"per-job results: {out_path}", err=True)
    if events_path is not None:
        ev = pd.concat([r.events.assign(run=r.label)[["run", *r.events.columns]] for r in runs], ignore_index=True)
        _replace(write, ev, events_path, meta)
        if not quiet:
            click.echo(f"event log: {events_path}", err=True)


def _replace(write, table, path: Path, meta: dict) -> None:
    """``write(table, path, meta)`` through a file beside ``path`` renamed over it (with its
    ``.meta.json`` for a CSV file)."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    write(table, tmp, meta)
    if path.suffix == ".csv":
        os.replace(f"{tmp}.meta.json", f"{path}.meta.json")
    os.replace(tmp, path)


def _check_out(path, option):
    from marketsched.results import check_path

    if path is not None:
        try:
            check_path(path, option)
        except ValueError as exc:
            raise click.BadParameter(str(exc).split(": ", 1)[1], param_hint=option) from None


@main.command()
@workload_options
@click.option("--mechanism", default="hb", show_default=True, metavar="NAME",
              help="Any registered mechanism (`marketsched mechanisms` lists them).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="A parameter of the mechanism (repeatable), e.g. --param pricing=first.")
@click.option("--pricing", default=None, type=click.Choice(PRICINGS),
              help="Same as --param pricing=...: payment scheme of hb, nphb, wspt, wsept (default kth).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write per-job results, with what produced them, to this .parquet or .csv file.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the per-job event log (start, preempt, resume, finish, payment) to this .parquet or .csv file.")
def simulate(mechanism, params, pricing, out_path, events_path, **opts):
    """Simulate one mechanism on a workload and print a summary.

    Example: marketsched simulate --trace LPC-EGEE-2004-1.2-cln --split --capacity 0.75 --mechanism hb --param pricing=first
    """
    from marketsched.mechanisms.registry import Unfit, get

    _check_out(out_path, "--out")
    _check_out(events_path, "--events")
    try:
        m = get(mechanism)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--mechanism") from None
    given = {}
    for name, key, value in _params(params):
        if name not in (None, mechanism):
            raise click.BadParameter(f"{name}.{key}: simulate runs {mechanism!r} only", param_hint="--param")
        given[key] = value
    if pricing is not None:
        if m.param("pricing") is None:
            raise click.BadParameter(f"{mechanism} has no pricing (it pays by its own rule)", param_hint="--pricing")
        given["pricing"] = pricing
    try:
        m.resolve(given)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--param") from None
    _engine_notice()
    scenario, jobs = _build(opts)
    _started()
    try:
        runs = _run_all(jobs, [(mechanism, given)], events=events_path is not None)
    except Unfit as exc:
        raise click.ClickException(f"{exc}") from None
    except Exception as exc:
        _mechanism_failed(mechanism, exc)
    w, form = runs[0].jobs.workload, runs[0].form  # the jobs in the mechanism's form (scenario.in_form)
    name = _workload_title(scenario, w) + ("" if form == "as given" else f" ({form})")
    _print_table(_summary_rows(jobs, runs), f"{name}: {len(w):,} jobs on {w.capacity} processors, truthful bids; "
                 f"engine: {runs[0].engine}")
    _warn_idle(jobs, runs)
    _write_outputs(scenario, jobs, runs, out_path, events_path, "simulate")
    _QUICK_EXIT["on"] = True  # everything is written; nothing is left running (see run)


@main.command()
@workload_options
@click.option("--mechanisms", default="all", show_default=True,
              help="Comma-separated mechanisms to compare; 'all': every registered mechanism that fits the workload.")
@click.option("--mechanism", "extra", multiple=True, metavar="NAME", help="A mechanism to compare (repeatable).")
@click.option("--param", "params", multiple=True, metavar="[NAME.]KEY=VALUE",
              help="A parameter: for the named mechanism, or every compared mechanism that has it (repeatable).")
@click.option("--pricings", default="kth,first", show_default=True,
              help="Payment schemes of the mechanisms with a pricing parameter (one run each).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every run's per-job results, with what produced them, to this .parquet or .csv file.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every run's per-job event log to this .parquet or .csv file.")
@click.option("--legend/--no-legend", default=True, show_default=True, help="Explain the columns under the table.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Draw per mechanism the slowdown and utility per value band, side by side, to this .png or .svg.")
def compare(mechanisms, extra, params, pricings, out_path, events_path, legend, plot_path, **opts):
    """Compare mechanisms on one workload (the main job; default: the built-in workload).

    Every mechanism sees the same jobs with the same true values and deadlines (common random
    numbers); bids are truthful. Rows are grouped by kind of mechanism.
    """
    from marketsched.mechanisms.registry import get, missing, names
    from marketsched.scenario import in_form

    _check_out(out_path, "--out")
    _check_out(events_path, "--events")
    if plot_path is not None and plot_path.suffix not in (".png", ".svg"):
        raise click.BadParameter(f"the file name must end in .png or .svg, got {str(plot_path)!r}", param_hint="--plot")
    wanted = [m.strip() for m in mechanisms.split(",") if m.strip()] + list(extra)
    if extra and mechanisms == "all":
        wanted.remove("all")
    every = "all" in wanted
    chosen = names() if every else list(dict.fromkeys(wanted))
    for m in chosen:
        try:
            get(m)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--mechanisms") from None
    prices = [p.strip() for p in pricings.split(",") if p.strip()]
    for p in prices:
        if p not in PRICINGS:
            raise click.BadParameter(f"unknown pricing {p!r}; choose from {', '.join(PRICINGS)}", param_hint="--pricings")
    given: dict[str, dict] = {m: {} for m in chosen}
    for name, key, value in _params(params):
        targets = [name] if name is not None else [m for m in chosen if get(m).param(key) is not None]
        if name is not None and name not in given:
            raise click.BadParameter(f"{name}.{key}: {name!r} is not among the compared mechanisms", param_hint="--param")
        if not targets:
            raise click.BadParameter(f"no compared mechanism has a parameter {key!r}", param_hint="--param")
        for t in targets:
            given[t][key] = value
    runs = []
    for m in chosen:
        mech = get(m)
        try:
            mech.resolve(given[m])
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--param") from None
        if mech.param("pricing") is not None and "pricing" not in given[m]:
            runs += [(m, {**given[m], "pricing": p}) for p in prices]
        else:
            runs.append((m, given[m]))
    scenario, jobs = _build(opts)
    skipped, fit = [], []
    for m, p in runs:
        gaps = missing(get(m), in_form(jobs, m)[0])
        if gaps:
            why = (m, "; ".join(g.split(" needs ", 1)[1] for g in gaps))
            if why not in skipped:  # once per mechanism, not once per pricing
                skipped.append(why)
        else:
            fit.append((m, p))
    if not fit:
        raise click.ClickException("no mechanism can run on this workload: "
                                   + " | ".join(f"{m}: {why}" for m, why in skipped))
    done: list = []
    failed: list[_Failure] = []

    def finished(r) -> None:  # each mechanism's rows are stored as it finishes
        done.append(r)
        _write_outputs(scenario, jobs, done, out_path, events_path, "compare", quiet=True)

    stopped: list[str] = []
    try:
        _run_all(jobs, fit, events=events_path is not None, on_done=finished, on_fail=failed.append)
    except KeyboardInterrupt:  # Ctrl-C: print and keep what finished
        ran = {r.label for r in done} | {f.label for f in failed}
        stopped = [label for label in (get(m).label(get(m).resolve(p)) for m, p in fit) if label not in ran]
        _write_outputs(scenario, jobs, done, out_path, events_path, "compare", quiet=True)
    w = jobs.workload
    _print_table(_summary_rows(jobs, done, failed), f"{_workload_title(scenario, w)}: {len(w):,} jobs on {w.capacity} "
                 f"processors, {scenario.values} values, {scenario.deadlines} deadlines (seed {scenario.seed}), "
                 "truthful bids", legend=legend, skipped=skipped, failed=failed, stopped=stopped)
    _print_forms(done, legend)
    names_run = {r.mechanism for r in done}
    if {"fcfs", "easy"} <= names_run and bool((w.procs == 1).all()):
        click.echo("note: every job is serial, so EASY has nothing to backfill and equals FCFS;\n"
                   "  try --trace SDSC-SP2-1998-4.2-cln --mechanisms fcfs,easy")
    for path, what in ((out_path, "per-job results"), (events_path, "event log")):
        if path is not None and done:
            click.echo(f"{what}: {path} ({len(done)} of {len(fit)} runs)", err=True)
    if plot_path is not None and done:
        _compare_plot(jobs, done, plot_path, f"{_workload_title(scenario, w)}: {scenario.values} values, "
                      f"seed {scenario.seed}")
    if stopped:
        raise SystemExit(130)  # the shell's status of a command stopped by Ctrl-C (128 + SIGINT)
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(fit)} runs failed: "
                                   + "; ".join(f"{f.label} ({f.why})" for f in failed))


def _workload_title(scenario, w) -> str:
    """The workload as the table's title names it: the trace's name, or the built-in one's."""
    return "built-in synthetic workload" if scenario.workload.trace is None else w.name


def _compare_plot(jobs, runs, path, title: str) -> None:
    """``compare --plot``: the figure of :mod:`marketsched.analysis.compare_plot`."""
    from marketsched.analysis.compare_plot import compare_figure
    from marketsched.analysis.plots import save
    from marketsched.mechanisms.registry import get
    from marketsched.results import job_table_of

    tables = []
    for r in runs:
        t = job_table_of(jobs, r)
        tables.append((r.label, t if get(r.mechanism).market else t.drop(columns="utility")))
    save(compare_figure(tables, title), path)
    click.echo(f"figure: {path}", err=True)


def _print_forms(runs, legend: bool = True) -> None:
    """Which form of the jobs each run ran (:func:`marketsched.scenario.in_form`), when they differ;
    with ``legend``, what each form is (:data:`marketsched.scenario.FORMS`)."""
    import textwrap

    from marketsched.scenario import FORMS

    forms: dict[str, tuple[int, list[str]]] = {}
    for r in runs:
        forms.setdefault(r.form, (len(r.jobs.workload), []))[1].append(r.label)
    if len(forms) < 2:
        return
    click.echo("forms (each mechanism runs the jobs as its paper states them; done counts that form's jobs):")
    for form, (n, labels) in forms.items():
        click.echo(textwrap.fill(f"{form} ({n:,} jobs): {', '.join(labels)}", width=100, initial_indent="  ",
                                 subsequent_indent="      "))
        if legend and form in FORMS:
            click.echo(textwrap.fill(f"= {FORMS[form]}", width=100, initial_indent="    ", subsequent_indent="      "))


def _default(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@main.command("mechanisms")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@click.option("--check", is_flag=True,
              help="Load every installed plugin and list the ones that did not load, and why (exit status 1 if any).")
def mechanisms_(name, as_json, check):
    """List every registered mechanism (name, kind, source, needs, parameters); NAME shows one in full."""
    import json

    from rich import box
    from rich.table import Table

    from marketsched.mechanisms.registry import NEEDS, describe, get, mechanisms

    if check:
        _check_plugins()
        return

    try:
        items = [get(name)] if name else mechanisms()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    if as_json:
        click.echo(json.dumps([describe(m) for m in items], indent=1, ensure_ascii=False))
        return
    console = _console()
    if name:
        import textwrap

        m = items[0]

        def line(indent: int, text: str) -> None:
            click.echo(textwrap.fill(text, width=100, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4)))

        line(0, f"{m.name}: {m.title} ({m.kind}, {m.origin})")
        for label, text in (("source", m.source), ("what", m.summary), ("live market", m.live)):
            line(2, f"{label}: {text}")
        line(2, "needs:" if m.needs or m.optional else "needs: nothing beyond the workload")
        for need in m.needs:
            line(4, f"{need}: {NEEDS[need]}")
        for need in m.optional:
            line(4, f"{need} (optional): {NEEDS[need]}")
        line(2, "parameters (--param KEY=VALUE):" if m.params else "parameters: none")
        for p in m.params:
            choices = f" ({'|'.join(map(str, p.choices))})" if p.choices else ""
            line(4, f"{p.name}: {p.type.__name__} = {_default(p.default)}{choices}. {p.help}")
        line(2, "incentive claims (checked by marketsched audit):" if m.claims else "incentive claims: none")
        for c in m.claims:
            line(4, f"{c.text} ({c.strength}; lies: {', '.join(c.lies)}): {c.source}")
        return
    from marketsched.mechanisms.registry import KINDS

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("name", min_width=11, max_width=13)
    table.add_column("source", ratio=5, overflow="fold")
    table.add_column("needs", ratio=3, overflow="fold")
    table.add_column("parameters", ratio=3, overflow="fold")
    kinds = [k for k in KINDS if any(m.kind == k for m in items)]
    for kind in kinds:
        table.add_row(f"[bold]{kind}[/]", f"[italic]{KINDS[kind]}[/]", "", "")
        for m in (m for m in items if m.kind == kind):
            params = ", ".join(f"{p.name}={_default(p.default)}" for p in m.params) or "-"
            needs = ", ".join([*m.needs, *(f"({n})" for n in m.optional)]) or "-"
            table.add_row(m.name + ("" if m.origin == "built-in" else " *"), m.source, needs, params)
        if kind != kinds[-1]:
            table.add_section()
    console.print(table)
    live = ", ".join(m.name for m in items if not m.live.startswith("no"))
    console.print("(optional inputs in brackets; * a plugin or registered from Python) `marketsched mechanisms NAME` shows one with its "
                  f"parameters' help and where and how it runs live; live: {live or 'none'}. Periodic auctions "
                  "that clear outside this engine: dpgva and relaxed-dpgva (Mutz 2008; `marketsched audit --mechanism`, "
                  "`marketsched market serve --dayahead`) and the grid exchange's critical-value, k-pricing, "
                  "pay-as-bid and exact (Stößer 2009; `marketsched exchange init --mechanism`).", highlight=False)


def _check_plugins() -> None:
    """``marketsched mechanisms --check``: every plugin entry point, loaded or not and why."""
    import warnings

    from marketsched.mechanisms import registry
    from marketsched.results import plugin_of

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", registry.PluginWarning)  # listed below instead
        registry.names()  # the built-ins first (a plugin loaded before them would be marked built-in)
        registry.load_plugins(reload=True)
    loaded = [m for m in registry.mechanisms() if m.origin.startswith("plugin ")]
    for m in loaded:
        p = plugin_of(m.name) or {}
        click.echo(f"ok      {m.name}: from {p.get('distribution')} {p.get('version') or ''}".rstrip())
    for ep_name, value, dist, why in registry.load_errors:
        click.echo(f"FAILED  {ep_name} ({value}{f', from {dist}' if dist else ''}): {why}")
    click.echo(f"{len(loaded)} plugin mechanism(s) loaded, {len(registry.load_errors)} entry point(s) failed",
               err=True)
    if registry.load_errors:
        raise SystemExit(1)


@main.command()
@click.argument("name", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the report (default: results/NAME).")
@click.option("--quick", is_flag=True,
              help="Reduced grid: 20-150 CPU seconds, as measured on a 2-core development machine (each "
                   "experiment's figure is listed by `marketsched reproduce`); a busy machine takes longer.")
@click.option("--seeds", type=click.IntRange(min=1), default=None, help="Number of seeds (default: the experiment's own).")
@click.option("--executor", type=click.Choice(["process", "serial", "ray", "slurm"]), default=None,
              help="Where the experiment's tasks run: local processes (default), in this process, on a Ray "
                   "cluster (pip install 'marketsched[ray]') or as a Slurm job array (OUT on a shared file system).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Tasks at once: local worker processes (default: the experiment's own), Ray tasks or Slurm "
                   "array tasks (default: the cluster's CPUs).")
@click.option("--address", default=None,
              help="Ray: the running cluster to join, e.g. 10.0.0.1:6379 or auto (default: $RAY_ADDRESS, else a "
                   "local Ray for the run).")
@click.option("--partition", default=None, help="Slurm: the partition of the job array (default: the cluster's).")
@click.option("--time", "time_limit", default=None, help="Slurm: time limit of each array task (sbatch --time, e.g. 30:00).")
@click.option("--cpus", type=click.IntRange(min=1), default=None, help="Slurm: CPUs of each array task (default 1).")
@click.option("--report-only", is_flag=True,
              help="Simulate nothing: rewrite the report from the stored results (--results).")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Stored results to read (default: OUT/results); a run stores them there.")
def reproduce(name: str | None, out_dir: Path | None, quick: bool, seeds: int | None, executor: str | None,
              workers: int | None, address: str | None, partition: str | None, time_limit: str | None,
              cpus: int | None, report_only: bool, results_dir: Path | None) -> None:
    """Reproduce a paper's experiments and write a report (list them without NAME).

    A run stores its results in OUT/results and writes OUT/report.md from them;
    `--report-only` rewrites the report from stored results without simulating. Finished tasks
    are stored as they end (in OUT/tasks; the grid runner's cells in OUT/results): running the
    same command again (after an interruption or a failed task) runs only the missing ones.
    """
    from marketsched import experiments

    found = experiments.available()
    if name is None:
        click.echo("Usage: marketsched reproduce NAME [--quick] [--out DIR]   "
                   "(e.g. marketsched reproduce feldman2005 --quick)")
        click.echo("Writes DIR/report.md (default DIR: results/NAME); --quick runs a reduced grid.\n")
        rows = [(key, getattr(module, "QUICK_TIME", "?"), getattr(module, "TITLE", "")) for key, module in found.items()]
        width = max((len(key) for key, _, _ in rows), default=4)
        click.echo(f"{'NAME':<{width}}  {'--quick CPU':<11}  reproduces")
        for key, quick_time, title in rows:
            click.echo(f"{key:<{width}}  {quick_time:<11}  {title}")
        click.echo("\n--quick CPU: CPU seconds of all its processes, measured on a 2-core development machine (AMD "
                   "EPYC); about 150-1,200 times `marketsched simulate` (0.13 CPU s) there. Wall time is longer on a busy machine.")
        return
    if name not in found:
        raise click.BadParameter(f"unknown experiment {name!r}; known: {', '.join(found) or 'none'}", param_hint="NAME")
    out_dir = out_dir or Path("results") / name
    module = found[name]
    if report_only:
        for flag, given in (("--quick", quick), ("--seeds", seeds), ("--executor", executor), ("--workers", workers),
                            ("--address", address), ("--partition", partition), ("--time", time_limit),
                            ("--cpus", cpus)):
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
    spec = _executor(executor, address=address, partition=partition, time=time_limit, cpus=cpus)
    extra = {k: v for k, v in (("executor", spec), ("workers", workers)) if v is not None}
    from marketsched.experiments.tasks import TasksFailed

    try:
        path = module.run(out_dir=out_dir, quick=quick, seeds=seeds, **extra)
    except TasksFailed as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"report: {path}")


def _executor(name: str | None, **options):
    """The executor of ``--executor`` with its cluster options (each belongs to one executor)."""
    from marketsched.experiments.tasks import Ray, Slurm

    owner = {"address": "ray", "partition": "slurm", "time": "slurm", "cpus": "slurm"}
    for key, value in options.items():
        if value is not None and name != owner[key]:
            raise click.BadParameter(f"--{key} goes with --executor {owner[key]}", param_hint=f"--{key}")
    if name == "ray":
        return Ray(address=options["address"])
    if name == "slurm":
        return Slurm(partition=options["partition"], time=options["time"], cpus=options["cpus"] or 1)
    return name


def _load_run(results, events, run):
    from marketsched.analysis.timeline import load

    try:
        return load(results, events, run)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None


RUN_FILES = [
    click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path)),
    click.option("--events", "events_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="The run's event log (simulate/compare --events)."),
    click.option("--run", "run_label", default=None, metavar="LABEL", help="Which run, when the files hold several."),
]


def run_files(f):
    for opt in reversed(RUN_FILES):
        f = opt(f)
    return f


@main.command()
@run_files
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("plots"),
              show_default=True, help="Folder for the figures.")
@click.option("--format", "formats", multiple=True, type=click.Choice(["png", "svg"]), default=("png",),
              show_default=True, help="Figure format (repeatable).")
@click.option("--bins", default=200, show_default=True, type=click.IntRange(min=1), help="Time bins of the series.")
@click.option("--gantt/--no-gantt", default=True, show_default=True,
              help="Draw the Gantt chart (refused above a few thousand jobs: simulate a --jobs slice).")
@click.option("--colour-by", "colour_by", type=click.Choice(["band", "user", "job"]), default=None,
              help="Gantt colours: by value band (the default when the jobs have true values), by user, or one per "
                   "job.")
@click.option("--labels/--no-labels", default=None,
              help="Write each Gantt bar's job id on it (default: up to 150 jobs).")
def plot(results, events_path, run_label, out_dir, formats, bins, gantt, colour_by, labels):
    """Figures of one run from its results file and event log: Gantt chart, utilisation, queue,
    bids and payments over time, slowdown per value band.

    Example: marketsched simulate --trace SDSC-SP2-1998-4.2-cln --mechanism easy --jobs 2000
    --out run.parquet --events events.parquet && marketsched plot run.parquet --events events.parquet
    """
    import numpy as np

    from marketsched.analysis import plots, timeline
    from marketsched.engine.events import replay
    from marketsched.mechanisms.registry import get

    table, log, workload, meta = _load_run(results, events_path, run_label)
    label = meta["label"]
    segs = timeline.segments(log, workload.procs, workload.capacity)
    t0 = float(workload.submit_time.min())
    market = get(meta["mechanism"]).market  # bids and payments mean nothing to a baseline
    bid = table["bid"].to_numpy() if market and "bid" in table and table["bid"].notna().all() else None
    ended = replay(log, len(workload)).end_time
    series = timeline.binned(segs, workload.submit_time, ended, workload.capacity, bins=bins, bid=bid,
                             events=log if market else None)
    title = f"{workload.name}, {len(workload):,} jobs on {workload.capacity} processors: {label}"
    kth = meta["mechanism"] in ("hb", "nphb") and meta.get("params", {}).get("pricing") == "kth"
    figures = {"timeline": plots.over_time(series, title, t0=t0, kth_price=kth)}
    if "value_band" in table:
        figures["slowdown"] = plots.slowdown_by_band(table, title)
    if gantt:
        colour_by = colour_by or ("band" if "value_band" in table and table["value_band"].notna().all() else "job")
        if colour_by == "band" and "value_band" not in table:
            raise click.BadParameter("the results have no value bands (no true values)", param_hint="--colour-by")
        group = {"band": lambda: table["value_band"].astype(str).to_numpy(),
                 "user": lambda: np.where(workload.user_id >= 0, [f"user {u}" for u in workload.user_id], "unknown"),
                 "job": lambda: None}[colour_by]()
        try:
            figures["gantt"] = plots.gantt(segs, workload.capacity, title, t0=t0, group=group,
                                           group_name={"band": "value band", "user": "user"}.get(colour_by, ""),
                                           labels=labels)
        except ValueError as exc:
            click.echo(f"gantt: {exc}", err=True)
    stem = "".join(c if c.isalnum() else "-" for c in label).strip("-")
    for name, fig in figures.items():
        for path in plots.save(fig, *[out_dir / f"{stem}-{name}.{fmt}" for fmt in dict.fromkeys(formats)]):
            click.echo(str(path))


@main.command()
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--events", "events_path", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The run's event log (simulate/compare --events); needed by --format batsim.")
@click.option("--run", "run_label", default=None, metavar="LABEL", help="Which run, when the files hold several.")
@click.option("--format", "fmt", type=click.Choice(["batsim", "batsim-workload"]), default="batsim",
              show_default=True,
              help="batsim: Batsim's jobs.csv of the run (one row per run segment), which evalys reads; "
                   "batsim-workload: the run's workload as a Batsim workload (JSON, delay profiles), before --split.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The file to write (e.g. jobs.csv, or workload.json).")
def export(results, events_path, run_label, fmt, out_path):
    """Write one run, or its workload, in Batsim's formats.

    Example: marketsched export run.parquet --events events.parquet --format batsim --out jobs.csv
    """
    from marketsched.analysis import batsim, timeline

    if fmt == "batsim-workload":
        _export_workload(results, out_path)
        return
    if events_path is None:
        raise click.BadParameter("--format batsim needs the run's event log", param_hint="--events")
    table, log, workload, meta = _load_run(results, events_path, run_label)
    segs = timeline.segments(log, workload.procs, workload.capacity)
    out = batsim.jobs_csv(workload, segs, meta["label"], copy=table["copy"].to_numpy())
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(out_path, index=False)
    click.echo(f"{fmt}: {len(out):,} rows ({out['job_id'].str.contains('#').sum():,} resumed segments) -> {out_path}")


def _export_workload(results: Path, out_path: Path) -> None:
    """The workload of a results file as Batsim JSON. Decision: before ``--split`` (Batsim runs
    parallel jobs itself, and a split workload's serial copies share their job id); every other
    transform (first N jobs, capacity, whole seconds, estimates) applies."""
    from dataclasses import replace

    from marketsched.results import read
    from marketsched.scenario import Scenario
    from marketsched.workloads.batsim import write_workload

    try:
        _, meta = read(results)
        spec = Scenario.from_dict(meta["scenario"]).workload
        w = replace(spec, split=False).build()
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from None
    write_workload(w, out_path)
    note = " (before --split)" if spec.split else ""
    click.echo(f"batsim-workload: {len(w):,} jobs on {w.capacity} resources{note} -> {out_path}")


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--no-trace-check", is_flag=True,
              help="Rerun even if a trace file's sha256 differs from the one recorded (the numbers may differ).")
def rerun(path, no_trace_check):
    """Simulate again what a result file records and say whether the table is identical.

    PATH: a file written by `simulate`/`compare --out`, a grid part (part-*.parquet), a grid's
    results folder, or a reproduction's task store (OUT/tasks). Exit status 0 when every table
    is identical, 1 when one differs, 2 when it cannot be rerun (the error says why).

    Example: marketsched simulate --mechanism easy --out run.parquet && marketsched rerun run.parquet
    """
    from marketsched.results import rerun_path

    try:
        outcomes = rerun_path(path, check_trace=not no_trace_check)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        click.echo(f"Error: {path}: cannot rerun: {exc}", err=True)
        raise SystemExit(2) from None
    for what, ok, detail in outcomes:
        click.echo(f"{what}: {'identical' if ok else 'DIFFERENT: ' + detail}")
    bad = sum(not ok for _, ok, _ in outcomes)
    click.echo(f"{len(outcomes) - bad} of {len(outcomes)} identical", err=True)
    raise SystemExit(1 if bad else 0)


@main.group()
def grid() -> None:
    """Sweeps declared in a grid file (TOML): mechanisms and parameters x workloads x seeds.

    `grid show FILE` prints the expanded cells and their count; `grid run FILE` runs them on the
    reproductions' task layer (local processes, Ray or Slurm; resumed when run again). See
    docs/grids.md.
    """


def _grid_file(path):
    from marketsched.experiments.grid import GridFileError, load

    try:
        return load(path)
    except (GridFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@grid.command("show")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def grid_show(path):
    """Print the cells of a grid file, their count and how many are already done."""
    from marketsched.experiments.runner import finished_cells

    g = _grid_file(path)
    done = finished_cells(g.out) if g.out.is_dir() else set()
    from marketsched.experiments.runner import norm_key

    for i, c in enumerate(g.cells, 1):
        click.echo(f"{i:>5}  {c.label()}{'  (done)' if norm_key(c.key()) in done else ''}")
    n_done = sum(norm_key(c.key()) in done for c in g.cells)
    plugins = "".join(f"; {n} from {p['distribution']} {p['version']}" for n, p in g.plugins.items())
    click.echo(f"{len(g.cells)} cells, {n_done} already in {g.out}; executor {g.executor}"
               f"{f', {g.workers} workers' if g.workers else ''}{plugins}")


def _grid_number(v: float) -> str:
    """A metric averaged over seeds: whole thousands up to ten million with separators (30,800
    completed jobs, not 3.08e+04), four significant digits otherwise."""
    return f"{v:,.0f}" if 1e3 <= abs(v) < 1e7 else f"{v:.4g}"


@grid.command("run")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Results folder (default: the file's `out`, relative to the file).")
@click.option("--executor", type=click.Choice(["process", "serial", "ray", "slurm"]), default=None,
              help="Overrides the file's executor.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Overrides the file's workers.")
def grid_run(path, out_dir, executor, workers):
    """Run the cells of a grid file not yet in its results folder, then print its metrics.

    The results folder holds the tidy table as Parquet parts (each with its provenance:
    `marketsched rerun` reruns them), failures.json for the cells that failed, and summary.csv
    (one row per cell, the file's metrics). Exit status 1 when a cell failed.
    """
    from marketsched.experiments.grid import summary
    from marketsched.experiments.runner import CELL_COLUMNS, run_grid

    g = _grid_file(path)
    _engine_notice()
    out = out_dir or g.out
    click.echo(f"{len(g.cells)} cells -> {out}", err=True)
    try:
        res = run_grid(g.cells, out, executor=executor or g.executor, workers=workers or g.workers,
                       max_batch=g.max_batch, description="grid cells")
    except (ValueError, RuntimeError, ImportError) as exc:
        raise click.ClickException(str(exc)) from None
    table = res.table()
    if not table.empty:
        s = summary(table, g.metrics)
        s.to_csv(out / "summary.csv", index=False)
        keys = [c for c in CELL_COLUMNS if c != "seed" and s[c].nunique() > 1] or ["mechanism"]
        mean = s.groupby(keys, sort=False)[list(g.metrics)].mean().reset_index()
        seeds = s["seed"].nunique()
        click.echo(f"mean over {seeds} seed{'s' if seeds > 1 else ''} (every cell: {out / 'summary.csv'})")
        if "jobs" in mean:
            mean["jobs"] = [f"{n:,}" if n else "all" for n in mean["jobs"]]  # 0: every job of the workload
        click.echo(mean.to_string(index=False, float_format=_grid_number))
    click.echo(f"ran {res.ran}, already done {res.skipped}, failed {len(res.failures)} of {res.cells} cells "
               f"({res.seconds:.1f} s)", err=True)
    if res.failures:
        for f in res.failures[:5]:
            click.echo(f"failed: {f['label']}: {f['error']}", err=True)
        click.echo(f"details: {out / 'failures.json'}; run again to retry the failed cells", err=True)
        raise SystemExit(1)


@main.command("audit")
@workload_options
@click.option("--mechanism", default="hb", show_default=True, metavar="NAME",
              help="Any registered market mechanism, or a day-ahead reservation auction: dpgva, relaxed-dpgva.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A parameter of the mechanism (repeatable).")
@click.option("--deviate", "deviations", multiple=True, metavar="KIND:AMOUNT[,...]",
              default=("value:0.5,0.8,1.25,2",), show_default=True,
              help="Lies to try (repeatable): value:FACTOR (bid x factor), estimate:FACTOR (run-time estimate x "
                   "factor; the length under dpgva, relaxed-dpgva), delay:SECONDS (arrive later), deadline:FACTOR (time "
                   "to the deadline x factor; EES, relaxed EES, Egg, dpgva, relaxed-dpgva), node:RANK (join the node of this rank by tentative utility, 1 = the best; "
                   "DLGM, P-DLGM).")
@click.option("--per-band", default=5, show_default=True, type=click.IntRange(min=1),
              help="Focal jobs drawn from each value band (low, middle, high).")
@click.option("--audit-seed", default=1, show_default=True, type=int, help="Seed of the focal-job draw.")
@click.option("--job", "job_ids", multiple=True, type=int, help="Audit this job id instead of a sample (repeatable).")
@click.option("--group", "group_share", type=click.FloatRange(0, 1, min_open=True), default=None, metavar="SHARE",
              help="Instead of one job at a time, random groups of this share of the jobs lie together (the "
                   "group model of Shudler et al. (2010)); gains are the group's summed true utility.")
@click.option("--groups", "group_count", type=click.IntRange(min=1), default=5, show_default=True,
              help="Random groups drawn with --group (each one rerun per lie).")
@click.option("--rerun", type=click.Choice(["incremental", "full"]), default="incremental", show_default=True,
              help="incremental: each lie is simulated from the deviator's arrival (a snapshot of the engine) "
                   "where the mechanism allows it (HB, NPHB, WSPT, WSEPT), else from the start; full: always from "
                   "the start. Both give the same numbers.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for audit.csv (every deviation), summary.csv, summary-by-band.csv, claims.csv (a "
                   "verdict per incentive property the mechanism claims) and a figure per deviation kind.")
def audit_(mechanism, params, deviations, per_band, audit_seed, job_ids, group_share, group_count, rerun, out_dir,
           **opts):
    """Does a job gain by lying? Paired reruns with one focal job's reports changed.

    Each focal job (sampled across value bands) lies in one way at a time; the rest stay truthful,
    with the same jobs, values and seed as the truthful run; the gain is its true utility with the
    lie minus without. Each lie is a rerun from the deviator's arrival, or from the start (--rerun).

    Example: marketsched audit --mechanism hb --param pricing=first --synthetic-jobs 300 --synthetic-nodes 8
    """
    from rich import box
    from rich.table import Table

    from marketsched.analysis import audit as au
    from marketsched.analysis import reservations
    from marketsched.analysis.plots import save
    from marketsched.mechanisms.registry import Unfit, get

    auction = reservations.AUCTIONS.get(mechanism)
    try:
        m = auction or get(mechanism)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}; or a reservation auction: {', '.join(reservations.AUCTIONS)}",
                                 param_hint="--mechanism") from None
    if not isinstance(m, reservations.Auction) and not m.market:
        raise click.BadParameter(f"{mechanism} takes no reports (no bids, no payments): nothing to audit",
                                 param_hint="--mechanism")
    given = {key: value for _, key, value in _params(params)}
    try:
        m.resolve(given)
        devs = [d for text in deviations for d in au.Deviation.parse(text)]
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    _engine_notice()
    scenario, jobs = _build(opts, forms=False)
    from marketsched.progress import BAR, ELAPSED, Progress

    try:
        with Progress("reruns", BAR, "{task.completed}/{task.total}", ELAPSED, transient=True) as bar:
            task = bar.add_task("audit", total=None)
            kw = dict(per_band=per_band, seed=audit_seed, job_ids=list(job_ids) or None, group=group_share,
                      group_draws_=group_count,
                      progress=lambda done, total: bar.update(task, completed=done, total=total))
            if auction is not None:
                table = reservations.audit(jobs, mechanism, given, devs, **kw)
            else:
                table = au.audit(jobs, mechanism, given, devs, rerun=rerun, **kw)
    except Unfit as exc:
        raise click.ClickException(str(exc)) from None
    except Exception as exc:
        if auction is not None and isinstance(exc, ValueError):
            raise click.ClickException(str(exc)) from None
        _mechanism_failed(mechanism, exc)
    s = au.summary(table)
    label = m.label(m.resolve(given))
    w = jobs.workload
    what = f"groups of {group_share:g} of the jobs lying together" if group_share else "one focal job's lie"
    out = Table(title=f"{label} on {w.name} ({len(w):,} jobs): gains of {what}, true utility",
                box=box.SIMPLE_HEAD, title_justify="left")
    for head in ("lie", "amount", "tried", "pays", "share (95% CI)", "mean gain", "largest gain",
                 "group" if group_share else "job"):
        out.add_column(head, justify="left" if head == "lie" else "right")
    for r in s.itertuples():
        out.add_row(r.kind, f"{r.amount:g}", str(r.deviations), str(r.profitable),
                    f"{r.share:.2f} ({r.ci_low:.2f}-{r.ci_high:.2f})", f"{r.mean_gain:.4g}", f"{r.max_gain:.4g}",
                    str(r.max_gain_job))
    console = _console()
    console.print(out)
    best = table.loc[table["gain"].idxmax()]
    if group_share and au.profitable(table.loc[[best.name]])[0]:
        case = table.loc[best.name]
        console.print(f"largest profitable group lie: group {case.job_id} ({case.copies} jobs), {case.kind} "
                      f"{case.amount:g}: summed true utility {case.truthful:.6g} -> {case.deviating:.6g} (gain "
                      f"{case.gain:.6g}). Reproduce: the same command (the groups are drawn with --audit-seed)",
                      highlight=False, markup=False)
    elif au.profitable(table.loc[[best.name]])[0]:
        case = table.loc[best.name]
        console.print(f"largest profitable lie: job {case.job_id} ({case.band} value {case.true_value:.4g}), "
                      f"{case.kind} {case.amount:g}: true utility {case.truthful:.6g} -> {case.deviating:.6g} "
                      f"(gain {case.gain:.6g}). Reproduce: the same command with --job {case.job_id} "
                      f"--deviate {case.kind}:{case.amount:g}", highlight=False, markup=False)
    else:
        console.print("no lie paid for any focal job", highlight=False)
    verdicts = au.claim_verdicts(table, m.claims)
    for v in verdicts:
        console.print(f"claim ({v['strength']}, {v['source']}): {v['claim']}\n  -> {v['text']}",
                      highlight=False, markup=False)
    if not m.claims:
        console.print(f"{m.name} claims no incentive property in the registry: the table is the finding",
                      highlight=False)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        table.to_csv(out_dir / "audit.csv", index=False)
        s.to_csv(out_dir / "summary.csv", index=False)
        au.summary(table, by=("kind", "amount", "band")).to_csv(out_dir / "summary-by-band.csv", index=False)
        import pandas as pd

        pd.DataFrame([{k: (v[k].text(".6g") if k == "mean_gain" and v[k] is not None else v[k])
                       for k in ("claim", "strength", "source", "verdict", "lies", "paid", "mean_gain", "text")}
                      for v in verdicts], columns=["claim", "strength", "source", "verdict", "lies", "paid",
                                                   "mean_gain", "text"]).to_csv(out_dir / "claims.csv", index=False)
        for kind in dict.fromkeys(table["kind"]):
            save(au.figure(table, kind, f"{label}: {kind} lies"), out_dir / f"{kind}.png")
        click.echo(f"audit: {out_dir}", err=True)


_QUICK_EXIT = {"on": False}  # set by a command that ends with nothing left to tear down
_GC_HELD = {"on": False}  # the console command holds the cycle collector off during its start-up (see run)


def _started() -> None:
    """The end of the console command's start-up (its modules imported, its input read): the
    objects made so far are moved out of the cycle collector's reach (:func:`gc.freeze`: they live
    as long as the process) and the collector runs again. Nothing when :func:`run` did not hold it."""
    if _GC_HELD["on"]:
        import gc

        _GC_HELD["on"] = False
        gc.freeze()
        gc.enable()


def run() -> None:
    """The ``marketsched`` console command: :func:`main`, and after a ``simulate`` that succeeded
    (its outputs written and closed, no thread or child left), the end of the process without the
    interpreter's teardown: the streams are flushed and the exit handlers run (``atexit``), then
    the process exits with status 0 at once, leaving the freeing of every module, array and object
    to the operating system (about 15-20 ms of CPU after a simulation of SDSC-SP2, an eighth of the
    whole process; ``benchmarks/bench_engine.py process``). Any other command, an error or an
    interruption ends as usual. :func:`main` itself (as tests and Python callers use it) never
    ends the process this way.

    Start-up without the cycle collector: the collector is off (if it was on) until the command's
    start-up ends (:func:`_started`: ``simulate`` once its workload is built, any other command
    before it begins), so the tens of thousands of objects that importing NumPy, click and the
    engine creates are not scanned again and again; :mod:`marketsched.console`, the installed
    command's entry point, turns it off before importing this module. About 5 ms of CPU of a
    ``simulate`` on SDSC-SP2's cached columns (``benchmarks/bench_engine.py process``)."""
    import gc

    if gc.isenabled():
        gc.disable()
        _GC_HELD["on"] = True
    try:
        main()
    except SystemExit as exc:
        if not (_QUICK_EXIT["on"] and exc.code in (0, None)):
            raise
        import atexit
        import sys

        atexit._run_exitfuncs()  # in the order of Python's own end: exit handlers, then the streams
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except OSError:  # a closed pipe, say: the usual end reports it
            raise exc from None
        os._exit(0)


if __name__ == "__main__":
    main()
