"""Books exact under kill -9 for the EES and relaxed-EES markets: the market dies at a point where it posts a
payment, starts a job's process, has just started one, or stops one at its declared run time
(a hook raises; the object is abandoned, as after kill -9, and an open transaction rolls back as
SQLite does for a killed writer), then a new market starts on the same database and machine.
Nothing accepted is lost, no job is launched twice, every recorded decision replays, the ledger
balances to the micro-unit, and the whole run still equals the simulator's."""

from __future__ import annotations

import pytest

from marketsched.live.ees import EESConfig, EESMarket
from marketsched.platform.clock import FakeClock
from marketsched.platform.ledger import MICRO, Store
from test_live_ees import assert_replays_equal, until
from test_live_exactly_once import Crash, FakeOS, ScriptedExecutor

CONFIGS = {"ees": EESConfig(cpus=1, n_draws=50), "relaxed-ees": EESConfig("relaxed-ees", cpus=1, n_draws=50)}
# (t, owner, value, delay cost, declared run time): A runs to 8; B, C and D queue (relaxed EES
# on one CPU: B is planned for 8, C and D wait), so the decisions at 8 weigh queues of several
# jobs, with payments
SCRIPT = [(0.0, "alice", 50.0, 0.5, 8.0), (1.0, "bob", 6.0, 0.2, 5.0), (2.0, "carol", 40.0, 0.9, 4.0),
          (3.0, "bob", 30.0, 0.7, 3.0), (20.0, "alice", 20.0, 0.3, 2.0)]


def open_market(tmp_path, clock, fake_os, mechanism):
    ex = ScriptedExecutor(tmp_path / "jobs", os=fake_os)
    return EESMarket(Store(tmp_path / "db"), CONFIGS[mechanism], clock, ex), ex


def arm(m, ex, point):
    """Make the market die at ``point``; returns a function that disarms it."""
    if point == "payment":
        post = m.store.post
        calls = []

        def dying_post(t, kind, *a, **kw):
            if kind == "ees payment":
                calls.append(1)
                if len(calls) == 2:
                    raise Crash
            return post(t, kind, *a, **kw)

        m.store.post = dying_post
    elif point == "before launch":
        ex.on_launch = lambda key: (_ for _ in ()).throw(Crash) if key > 1 else None
    elif point == "after launch":
        ex.after_launch = lambda key: (_ for _ in ()).throw(Crash) if key > 1 else None
    elif point == "before kill":
        ex.on_kill = lambda key: (_ for _ in ()).throw(Crash)


@pytest.mark.parametrize("mechanism", ["ees", "relaxed-ees"])
@pytest.mark.parametrize("point", ["payment", "before launch", "after launch", "before kill"])
def test_kill_9_at_each_point_and_restart_keeps_the_books_exact(tmp_path, point, mechanism):
    clock, fake_os = FakeClock(0.0), FakeOS()
    m, ex = open_market(tmp_path, clock, fake_os, mechanism)
    for u in ("alice", "bob", "carol"):
        m.add_user(u, 100.0)
    arm(m, ex, point)
    crashed = False
    k = 0
    while k < len(SCRIPT):
        t, owner, v, d, r = SCRIPT[k]
        try:
            until(m, clock, t)
            m.submit(owner, v, d, r, "true")
            k += 1
        except Crash:  # kill -9: the object is abandoned; a new market opens the database
            assert not crashed, "the market died twice"
            crashed = True
            m.store.close()
            before = Store(tmp_path / "db").entries()
            m, ex = open_market(tmp_path, clock, fake_os, mechanism)
            # the restart replays what was recorded (posting nothing again: the ledger is checked
            # against the decisions at the end) and carries out what fell due
            assert m.store.entries()[:len(before)] == before
            if m.store.job(k + 1) is None:  # the submission was rolled back: the client sends it again
                continue
            k += 1
    until(m, clock, 1000.0)
    assert crashed
    ids = [j["id"] for j in m.store.jobs()]
    assert ids == list(range(1, len(SCRIPT) + 1))  # nothing accepted was lost, nothing twice
    assert len(fake_os.launches) == len(set(fake_os.launches))  # no process started twice
    assert set(fake_os.launches) == {j for j in ids if m.state[j] in ("completed", "stopped")}
    assert not fake_os.alive or set(fake_os.alive) <= set(fake_os.killed)
    assert {m.state[j] for j in ids} <= {"completed", "stopped", "discarded"}
    books = m.store.check_books()
    assert books["users"] + books["revenue"] == books["deposits"] == 300 * MICRO
    assert_replays_equal(m)


def test_a_market_down_past_the_declared_run_times_stops_the_jobs_at_them(tmp_path):
    """The market dies at 3 with A running (declared to 8) and B, C, D queued, and comes back at
    100: A is stopped at 8, the decisions of 8 are taken at 8 and the next job is stopped at its
    own declared end, as if the market had never been down; the run replays equal."""
    clock, fake_os = FakeClock(0.0), FakeOS()
    m, ex = open_market(tmp_path, clock, fake_os, "ees")
    for u in ("alice", "bob", "carol"):
        m.add_user(u, 100.0)
    for t, owner, v, d, r in SCRIPT[:4]:
        clock.set(t)
        m.submit(owner, v, d, r, "true")
    m.store.close()  # kill -9 at 3
    clock.set(100.0)
    m, ex = open_market(tmp_path, clock, fake_os, "ees")
    e = m.engine
    assert e.end_time[0] == 8.0 and fake_os.killed[0] == 1  # A's process, killed after the restart
    assert m.state[2] == "discarded" and e.first_start[2] == 8.0 and e.end_time[2] == 12.0
    assert e.end_time[3] == 15.0 and set(m.state.values()) == {"stopped", "discarded"}
    books = m.store.check_books()
    assert books["users"] + books["revenue"] == books["deposits"] == 300 * MICRO
    assert_replays_equal(m)
