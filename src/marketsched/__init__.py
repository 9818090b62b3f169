"""marketsched: market-based scheduling for distributed computing.

Mechanisms from five research documents (see README), one discrete-event engine,
shared workloads, metrics and incentive analysis, and a live market.
"""

__version__ = "0.1.0"
