"""The ``marketsched`` command line."""

from __future__ import annotations

from pathlib import Path

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="marketsched")
def main() -> None:
    """Market-based scheduling for distributed computing: simulate, reproduce, serve."""


@main.command()
@click.argument("name", required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the report (default: results/NAME).")
@click.option("--quick", is_flag=True, help="Reduced grid that finishes in about a minute.")
@click.option("--seeds", type=click.IntRange(min=1), default=None, help="Number of seeds (default: the experiment's own).")
def reproduce(name: str | None, out_dir: Path | None, quick: bool, seeds: int | None) -> None:
    """Reproduce a paper's experiments and write a report (list them without NAME)."""
    from marketsched import experiments

    found = experiments.available()
    if name is None:
        for key, module in found.items():
            click.echo(f"{key:20s} {getattr(module, 'TITLE', '')}")
        return
    if name not in found:
        raise click.BadParameter(f"unknown experiment {name!r}; known: {', '.join(found) or 'none'}", param_hint="NAME")
    out_dir = out_dir or Path("results") / name
    path = found[name].run(out_dir=out_dir, quick=quick, seeds=seeds)
    click.echo(f"report: {path}")


if __name__ == "__main__":
    main()
