"""marketsched: market-based scheduling for distributed computing.

Mechanisms from five research documents (see README), one discrete-event engine,
shared workloads, metrics and incentive analysis, and a live market.
"""


def __getattr__(name: str) -> str:
    """``__version__`` on first use: importlib.metadata costs tens of milliseconds at start-up."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:  # one source of truth: the version in pyproject.toml, as installed
        value = version("marketsched")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0+unknown"
    globals()["__version__"] = value
    return value
