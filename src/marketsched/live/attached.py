"""What a market attached to the live broker (``market serve --mechanism ...``: a mechanism
with its own tables beside the broker's users, ledger, lock and server) needs besides its
mechanism: its loop thread, the command line of a submission, and the collection of its HTTP
routes. Used by :mod:`marketsched.live.ees_service` and :mod:`marketsched.live.ees_api`."""

from __future__ import annotations

import shlex
import threading
import traceback
from typing import Any

from marketsched.platform import validation
from marketsched.platform.http import Route
from marketsched.platform.validation import MarketError


def command_line(command, max_bytes: int) -> str:
    """A submission's command: a string, or a list of arguments quoted into one; 400 for
    anything else, 413 beyond ``max_bytes`` (the market then checks it is not empty)."""
    if isinstance(command, list):
        if not all(isinstance(c, str) for c in command):
            raise MarketError("command must be a string or a list of strings")
        command = shlex.join(command) if command else ""
    if isinstance(command, str) and len(validation.utf8(command, "command")) > max_bytes:
        raise MarketError(f"command is longer than the {max_bytes} bytes this market accepts", 413)
    return command


def collector(routes: list[Route]):
    """A decorator ``route(method, path, summary, **kw)`` that appends each handler to ``routes``."""

    def route(method: str, path: str, summary: str, **kw):
        def deco(f):
            routes.append(Route(method, path, f, summary, **kw))
            return f

        return deco

    return route


class Loop:
    """The loop thread of an attached market: it sleeps until ``next_event()`` (market time, at
    most 0.5 s, woken by the executor) and calls ``step()``; an error is printed and kept in
    :attr:`last_error`, and the loop goes on. Subclasses set ``broker``, ``executor``, ``name``
    and define ``next_event`` and ``step``."""

    broker: Any
    executor: Any
    name: str
    _thread: threading.Thread | None = None
    last_error: str | None = None

    def next_event(self) -> float:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def start(self):
        self._stopping = threading.Event()

        def loop():
            while not self._stopping.is_set():
                with self.broker.lock:
                    wait = min(max(self.next_event() - float(self.broker.wall()), 0.0), 0.5)
                self.executor.wait(wait)
                if self._stopping.is_set():
                    break
                try:
                    self.step()
                except Exception:  # keep the market alive; the error is printed and kept
                    self.last_error = traceback.format_exc()
                    traceback.print_exc()

        self._thread = threading.Thread(target=loop, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, kill: bool = False) -> None:
        """Stop the loop; jobs run on (a restarted market re-attaches them), or with ``kill``
        their processes are killed."""
        if self._thread is not None:
            self._stopping.set()
            self.executor.wake()
            self._thread.join(timeout=10)
        self.executor.shutdown(kill=kill)
