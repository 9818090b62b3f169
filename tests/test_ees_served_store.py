"""The served EES market's settings and tables without processes (an injected clock, no
executor): what a restart may change, and the job lists of ``market list``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from marketsched.live.ees import EESConfig, EESMarket
from marketsched.live.ees_service import EESTables
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import Store


def market(tmp_path, store=None, **cfg):
    m = EESMarket(store if store is not None else Store(tmp_path), EESConfig(**{"cpus": 1, "n_draws": 20, **cfg}),
                  FakeClock(0.0))
    for u in ("alice", "bob"):
        m.add_user(u, 100.0)
    return m


def test_a_restart_may_change_the_job_limit_but_not_the_mechanism_s_settings(tmp_path):
    """The recorded decisions replay the same under any limit of jobs per user (a refused
    submission records nothing), so a market restarts with another limit; another seed would
    decide otherwise, and is refused naming the recorded settings."""
    m = market(tmp_path)
    m.submit("alice", 10, 0.1, 5, "true")
    cfg = m.config
    again = EESMarket(Store(tmp_path), replace(cfg, max_jobs_per_user=3), FakeClock(1.0))
    assert again.decisions() == m.decisions() and again.config.max_jobs_per_user == 3
    with pytest.raises(ValueError, match="this market's database was made for"):
        EESMarket(Store(tmp_path), replace(cfg, seed=cfg.seed + 1), FakeClock(1.0))


def test_the_served_tables_list_jobs_by_owner_state_and_page(tmp_path):
    """EES jobs in their own tables (the broker's ``jobs`` never sees them): filtered by owner,
    state, the newest N and ids below a bound, oldest first; against a plain filter of all."""
    m = market(tmp_path, EESTables(Store(tmp_path)))
    for k, u in enumerate(("alice", "bob", "alice", "bob", "alice")):
        m.clock.set(float(k))
        m.submit(u, 10, 0.5, 100, "true")  # the first runs, the others wait
    t = m.store
    every = t.jobs()
    assert [j["id"] for j in every] == [1, 2, 3, 4, 5] and Store(tmp_path).jobs() == []
    for owner, limit, states, before in ((None, None, None, None), ("alice", None, None, None), (None, 2, None, None),
                                         (None, None, ["queued"], None), ("bob", 1, ["queued"], 5),
                                         (None, 10, ["running", "queued"], 3)):
        want = [j for j in every if (owner is None or j["owner"] == owner) and (states is None or j["state"] in states)
                and (before is None or j["id"] < before)]
        assert t.jobs(owner, limit, states, before) == (want if limit is None else want[-limit:])
