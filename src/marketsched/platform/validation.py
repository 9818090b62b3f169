"""Input checks every live market applies to what a party sends: numbers, amounts of money,
whole numbers (ids, page sizes), text, and Unix account names.

Each check returns the value in the form the market stores (a float, micro-units, an int,
UTF-8 bytes, a :class:`~marketsched.platform.executor.RunAs`) or raises :class:`MarketError`
naming the field and showing (a bounded part of) what was given, so a bad request is answered
400 with the problem and where it is, never with a traceback nor silently clipped.
"""

from __future__ import annotations

import math
import os
import re

from marketsched.platform.executor import RunAs
from marketsched.platform.ledger import MICRO

NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")

# Bounds of every number a user gives (a value outside is refused with 400, naming the field).
MAX_BID = 1e9  # per second of running time
MAX_DEPOSIT = 1e9  # one deposit (the ledger's own bound, MAX_BALANCE, caps the total)
MAX_ID = 2**63 - 1  # ids are 64-bit integers in the database


class MarketError(Exception):
    """A request the market refuses; ``status`` is the HTTP status the API answers with."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


def to_micro(amount: float) -> int:
    """An amount of money in the ledger's micro-units (rounded to the nearest)."""
    return int(round(amount * MICRO))


def show(x, width: int = 60) -> str:
    """``repr(x)`` cut to ``width`` characters (an error message never echoes a huge value)."""
    r = repr(x) if not isinstance(x, int) or abs(x) < 10**width else f"a {len(str(abs(x)))}-digit integer"
    return r if len(r) <= width else f"{r[:width]}... ({len(r)} characters)"


def number(x, what: str) -> float:
    """A finite number (int or float, not bool) whose magnitude a float holds exactly enough;
    MarketError naming ``what`` otherwise."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MarketError(f"{what} must be a number, got {show(x)}")
    if isinstance(x, int) and abs(x) > 2**63:
        raise MarketError(f"{what} must be a finite number, got {show(x)}")
    x = float(x)
    if not math.isfinite(x):
        raise MarketError(f"{what} must be a finite number, got {x!r}")
    return x


def bid(x) -> float:
    """A bid per second of running time: a finite number in (0, ``MAX_BID``]."""
    value = number(x, "bid")
    if not 0 < value <= MAX_BID:
        raise MarketError(f"bid must be a finite positive number (per second of running time) of at most "
                          f"{MAX_BID:g}, got {value!r}")
    return value


def amount(x, what: str, allow_zero: bool = False) -> int:
    """An amount of money (positive, or zero with ``allow_zero``; at most ``MAX_DEPOSIT``) in
    micro-units."""
    x = number(x, what)
    if x < 0 or (x == 0 and not allow_zero):
        raise MarketError(f"{what} must be a positive amount, got {x!r}")
    if x > MAX_DEPOSIT:
        raise MarketError(f"{what} of {x!r} is larger than the market accepts ({MAX_DEPOSIT:g})")
    return to_micro(x)


def whole(x, what: str, lo: int = 1, hi: int = MAX_ID) -> int:
    """A whole number from ``lo`` to ``hi``, given as an int or as its decimal digits (a path
    or query parameter); MarketError naming ``what`` otherwise."""
    if isinstance(x, str):
        t = x.strip()
        if not re.fullmatch(r"-?[0-9]{1,40}", t):
            raise MarketError(f"{what} must be a whole number from {lo} to {hi}, got {show(x)}")
        x = int(t)
    if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
        raise MarketError(f"{what} must be a whole number from {lo} to {hi}, got {show(x)}")
    return x


def utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (JSON lets one through as ``\\udXXX``) is refused."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MarketError(f"{what} contains {text[exc.start]!r} at character {exc.start}, a lone surrogate, "
                          "which is not text") from None


def command_line(command, max_bytes: int) -> str:
    """A job's command line: a non-empty string without NUL characters (400), at most
    ``max_bytes`` bytes of UTF-8 (413 beyond)."""
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        raise MarketError("command must be a non-empty string without NUL characters: the command line to run")
    size = len(utf8(command, "command"))
    if size > max_bytes:
        raise MarketError(f"command is {size} bytes long, more than the {max_bytes} this market accepts", 413)
    return command


def unix_account(unix) -> RunAs:
    """The Unix account a market user may be mapped to: it exists here, and is neither root nor
    the market's own account (jobs run as it)."""
    if not isinstance(unix, str) or not unix or len(unix) > 32 or not set(unix) <= NAME_CHARS:
        raise MarketError(f"unix must be a Unix account name (1-32 letters, digits, '_', '.' or '-'), got {show(unix)}")
    try:
        account = RunAs.lookup(unix)
    except ValueError as exc:
        raise MarketError(f"unix: {exc}") from None
    if account.uid == os.geteuid():
        raise MarketError(f"unix: {unix!r} is the broker's own account; a market user's jobs must not run as it")
    return account
