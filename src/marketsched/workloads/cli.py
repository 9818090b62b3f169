"""``marketsched traces list|fetch|path``: the trace registry on the command line.

The main CLI registers this group with ``main.add_command(traces)``.
"""

from __future__ import annotations

import warnings

import click

from . import registry


def _fmt(n) -> str:
    return "?" if n is None else f"{n:,}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def traces() -> None:
    """Known Parallel Workloads Archive traces: list, download, locate.

    A trace is looked for in $MARKETSCHED_TRACES, then the cache ($MARKETSCHED_CACHE or
    ~/.cache/marketsched/traces), then downloaded with a sha256 check. Once parsed, its
    columns are kept in ~/.cache/marketsched/columns, keyed by the file's sha256
    ($MARKETSCHED_COLUMN_CACHE moves it; MARKETSCHED_COLUMN_CACHE=off turns it off).
    """


@traces.command("list")
@click.option("--traces-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of trace files (default: $MARKETSCHED_TRACES).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Download cache (default: $MARKETSCHED_CACHE or ~/.cache/marketsched/traces).")
def list_(traces_dir, cache_dir) -> None:
    """Table of known traces: name, jobs, processors, and where each is (here/cached/remote).

    On a terminal the table is as wide as the terminal (the notes wrap, the names never);
    elsewhere 100 columns."""
    from rich.console import Console
    from rich.table import Table

    from marketsched.terminal import WIDTH, rich_console

    table = Table(title="Parallel Workloads Archive traces", title_justify="left")
    for col in ("name", "jobs", "procs", "where", "sha256", "note"):
        table.add_column(col, justify="right" if col in ("jobs", "procs") else "left",
                         no_wrap=col != "note", overflow="fold", ratio=1 if col == "note" else None)
    for name, info in sorted(registry.TRACES.items(), key=lambda kv: kv[0].lower()):
        where, _ = registry.where(name, traces_dir=traces_dir, cache_dir=cache_dir)
        table.add_row(name, _fmt(info.jobs), _fmt(info.procs), where,
                      "known" if info.sha256 else "unknown", info.note)
    console = rich_console(min_width=0) or Console(width=WIDTH)
    console.print(table)


@traces.command()
@click.argument("name")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Download cache.")
@click.option("--force", is_flag=True, help="Download again even if a cached copy exists.")
def fetch(name, cache_dir, force) -> None:
    """Download trace NAME into the cache and check its sha256."""
    try:
        info = registry.trace_info(name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", registry.UnverifiedTraceWarning)
            path = registry.fetch(name, cache_dir=cache_dir, force=force)
        for w in caught:
            click.echo(f"warning: {w.message}", err=True)
        if info.sha256 and not caught:
            registry.verify_file(path, info)
            click.echo(f"sha256 ok: {info.sha256}", err=True)
    except (KeyError, registry.TraceNotFoundError, registry.ChecksumError) as exc:
        raise click.ClickException(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from None
    click.echo(str(path))


@traces.command()
@click.argument("name")
@click.option("--traces-dir", type=click.Path(file_okay=False), default=None, help="Folder of trace files.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Download cache.")
@click.option("--download/--no-download", default=True, show_default=True,
              help="Download the trace when it is neither in the folder nor cached.")
@click.option("--verify", is_flag=True, help="Check the sha256 of a file found on disk.")
def path(name, traces_dir, cache_dir, download, verify) -> None:
    """Print the local path of trace NAME (a path, a name in the folder or cache, or downloaded)."""
    try:
        p = registry.resolve_trace(name, traces_dir=traces_dir, cache_dir=cache_dir, download=download,
                                   verify=verify)
    except (registry.TraceNotFoundError, registry.ChecksumError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(str(p))
