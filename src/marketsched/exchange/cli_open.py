"""How the exchange's command line opens an exchange's database and turns the exchange's
refusals into error messages (shared by :mod:`.cli` and :mod:`.egg_cli`)."""

from __future__ import annotations

from pathlib import Path

import click

from .store import ExchangeStore


def open_store(data: Path) -> ExchangeStore:
    """The exchange's database in ``data`` (ClickException if it cannot be opened: a newer
    schema, a folder of another account's; SQLite's own errors are the command group's, :mod:`.cli`)."""
    try:
        return ExchangeStore(data)
    except (RuntimeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def open_exchange(data: Path, backends=None):
    """The exchange in ``data`` on the wall clock (ClickException if there is none)."""
    from marketsched.platform.clock import WallClock

    from .core import Exchange

    if not (data / "exchange.db").exists():
        raise click.ClickException(f"no exchange at {data} (create one with: marketsched exchange init {data})")
    store = open_store(data)
    settings = store.settings()
    if settings is None:
        raise click.ClickException(f"the exchange at {data} is not set up (marketsched exchange init {data})")
    return Exchange(store, WallClock(settings["epoch"]), backends)


def click_errors(fn, *args):
    """``fn(*args)``, a ValueError (the exchange's refusal, naming the problem) as a ClickException."""
    try:
        return fn(*args)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
