"""The installed ``marketsched`` command's entry point: :func:`marketsched.cli.run` with the cycle
collector off from the first import on (importing the command line, click among it, is a third of
the start-up it saves; :func:`marketsched.cli.run` says when it comes back on). Python callers
import :mod:`marketsched.cli` instead, which leaves the collector alone."""

import gc

_HOLD = gc.isenabled()
gc.disable()

from marketsched import cli  # noqa: E402 - after the collector is off

cli._GC_HELD["on"] = _HOLD
run = cli.run
