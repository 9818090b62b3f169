"""marketsched: market-based scheduling for distributed computing.

Mechanisms from five research documents (see README), one discrete-event engine,
shared workloads, metrics and incentive analysis, and a live market.
"""

from importlib.metadata import PackageNotFoundError, version

try:  # one source of truth: the version in pyproject.toml, as installed
    __version__ = version("marketsched")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
