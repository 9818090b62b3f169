"""The keep-alive loop of a market's thread (the priority market's, the day-ahead auction's, an
attached market's, Tycoon's agents): wait, run one round, again until told to stop. A round
that raises does not end the market: the error is kept on the market (``last_error``, the
traceback's text, for its pages and tests) and printed once to stderr, and the next round runs
as usual."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Protocol


class Kept(Protocol):
    """What keeps a round's error: the market object."""

    last_error: str | None


def run_rounds(owner: Kept, wait: Callable[[], bool], round_: Callable[[], object]) -> None:
    """Run rounds until stopped. Steps, repeated:

    1. ``wait()``: block until the next round is due; True means stop (the loop returns);
    2. ``round_()``; an exception it raises is caught: its traceback is kept as
       ``owner.last_error`` and printed (``traceback.print_exc``), and the loop goes on.

    An exception of ``wait`` itself is not caught (it is a bug of the loop, not of a round)."""
    while not wait():
        try:
            round_()
        except Exception:  # keep the market alive; the error is printed and kept
            owner.last_error = traceback.format_exc()
            traceback.print_exc()


def start_rounds(owner: Kept, name: str, wait: Callable[[], bool], round_: Callable[[], object]) -> threading.Thread:
    """:func:`run_rounds` on a new daemon thread called ``name``, started; returns the thread."""
    thread = threading.Thread(target=run_rounds, args=(owner, wait, round_), name=name, daemon=True)
    thread.start()
    return thread
