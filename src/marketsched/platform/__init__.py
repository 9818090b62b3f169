"""The platform every live market runs on: identity and tokens, the HTTP server and its limits,
request checks, the double-entry ledger, the live engine (a mechanism on a clock), the executors
(local cgroups, Slurm) with the launcher, the command line's client and the web-page scaffold.

A market (the priority market in :mod:`marketsched.live`, the day-ahead auction, Tycoon mode,
the grid exchange in :mod:`marketsched.exchange`) is a thin front-end on it: a mechanism object,
its bid language and validation, how a decision is triggered, what it records, who pays on each
failure, and its pages. ``docs/architecture.md`` draws the layers and lists what a new market
writes; ``tests/test_live_platform_example.py`` is one, end to end.
"""
