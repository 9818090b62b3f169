"""The six providers of the Kang & Parkes (2007) reproduction, and its table geometry.

Kept apart from :mod:`marketsched.experiments.kang2007` (which imports pandas for its report)
so that the registered ``egg`` mechanism builds its market without that import.

Decisions (the paper leaves pricing, scheduling and failures to the providers; our design):
``PROVIDERS`` gives each provider's capacity, scheduler, pricing, rate (currency per estimated
CPU-hour), kappa, estimator quantile and crash rate per CPU-second; ``SCENARIOS`` the pricing
variants. Price tables: ``SLOT`` = 1 h columns over ``HORIZON`` = 48 of them, patience bound
``DELTA`` = 24 h, run-time buckets ``RT_EDGES`` (seconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

HOUR = 3600.0
SLOT, DELTA, HORIZON = HOUR, 24 * HOUR, 48
RT_EDGES = np.array([0, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600, 86400.0])
# providers (the paper leaves pricing, scheduling and failures to them; our design): capacity,
# scheduler, pricing, rate (currency per estimated CPU-hour), kappa, estimator quantile,
# crash rate per CPU-second
PROVIDERS: list[dict[str, Any]] = [
    dict(capacity=20, scheduler="edf", pricing="load", rate=1.0, kappa=4.0, quantile=0.9, crash=2e-6),
    dict(capacity=16, scheduler="fifo", pricing="static", rate=1.0, kappa=0.0, quantile=0.8, crash=2e-6),
    dict(capacity=12, scheduler="edf", pricing="load", rate=0.9, kappa=8.0, quantile=0.6, crash=5e-6),
    dict(capacity=12, scheduler="edf", pricing="capped", rate=0.8, kappa=0.0, quantile=0.7, crash=3e-5),
    dict(capacity=8, scheduler="edf", pricing="load", rate=1.2, kappa=4.0, quantile=0.95, crash=1e-6),
    dict(capacity=4, scheduler="fifo", pricing="static", rate=1.4, kappa=0.0, quantile=0.95, crash=5e-7),
]
# pricing kinds: "static" flat per-unit price, never closes a slot; "capped" the same flat price
# but +inf where a job of the bucket's size no longer fits (EDF test); "load" capped and raised
# by 1 + kappa u^2 with the committed share u of the capacity
SCENARIOS = {
    "mixed": lambda p: p,
    "static": lambda p: {**p, "pricing": "static"},
    "capped": lambda p: {**p, "pricing": "capped"},
    "load-aware": lambda p: {**p, "pricing": "load", "kappa": max(p["kappa"], 4.0)},
}
