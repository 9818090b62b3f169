"""The share market on several CPUs, process-free: what a share of ``N`` CPUs is for serial jobs
(Stößer 2009, section 6.4.1: ``x_j = min(c_j, tau_j C)`` with ``c_j = 1``, the excess wasted) and
the placement that enforces it (first-fit decreasing, :func:`marketsched.live.share.place`),
each against a plain reference on random instances with ties."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from marketsched.live.cli import market
from marketsched.live.share import FixedBids, RecordedBids, ShareMarket, place, replay_through_simulator
from marketsched.mechanisms.online.share import sh_shares_rational

POOL = sorted(os.sched_getaffinity(0))[:2]
two_cpus = pytest.mark.skipif(len(POOL) < 2, reason="needs two CPUs")


def reference_place(x, n):
    """First-fit decreasing, written out: largest share first (ties: lower job), onto the first
    CPU with room for it; -1 if none has room, -2 for a share of 0."""
    out, load = [-2] * len(x), [Fraction(0)] * n
    for i in sorted(range(len(x)), key=lambda i: (-x[i], i)):
        if x[i] == 0:
            continue
        for c in range(n):
            if load[c] + x[i] <= 1:
                out[i], load[c] = c, load[c] + x[i]
                break
        else:
            out[i] = -1
    return out


def reference_allocation(rule, bids, n):
    """``x_j = min(1, tau_j N)`` in exact arithmetic, tau by the rule's definition (PS b_j / sum b,
    section 6.2.2; SH section 6.2.3)."""
    if rule == "ps":
        tot = sum(Fraction(b) for b in bids)
        tau = [Fraction(b) / tot for b in bids]
    else:
        tau = sh_shares_rational(bids)
    return [min(Fraction(1), t * n) for t in tau]


def test_place_is_first_fit_decreasing_on_random_shares_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 5))
        x = [Fraction(int(k), 6) for k in rng.integers(0, 7, size=int(rng.integers(1, 8)))]
        got = place([float(v) for v in x], n)
        assert got.tolist() == reference_place(x, n), x
        for c in range(n):  # a CPU's pinned jobs never need more than the CPU
            assert sum(v for v, w in zip(x, got) if w == c) <= 1


def test_place_packs_the_two_cpu_example_and_floats_what_does_not_fit():
    assert place([1.0, 2 / 3, 1 / 3], 2).tolist() == [0, 1, 1]  # PS of 3,2,1 on two CPUs
    assert place([2 / 3, 2 / 3, 2 / 3], 2).tolist() == [0, 1, -1]
    assert place([0.0, 0.5], 1).tolist() == [-2, 0]
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        place([1.5], 2)
    with pytest.raises(ValueError, match="at least one CPU"):
        place([0.5], 0)


@two_cpus
@pytest.mark.parametrize("rule", ["ps", "sh"])
def test_periods_on_two_cpus_are_min_one_and_share_times_n(rule):
    """Every period on a pool of two CPUs gives each job min(1, 2 tau_j) CPUs (caps bind and the
    excess is wasted), pay-as-bid; replayed through the simulator on two CPUs, the same CPU-seconds
    and payments."""
    rng = np.random.default_rng(11)
    for _ in range(10):
        n = int(rng.integers(1, 6))
        table = rng.integers(0, 5, size=(5, n)).astype(float)
        table[:, 0] = np.maximum(table[:, 0], 1.0)
        m = ShareMarket(POOL, rule, RecordedBids(table), np.ones(n), enforcement="cgroup1")
        for row in table:
            p = m._round()
            ref = reference_allocation(rule, row, 2)
            np.testing.assert_allclose(p.shares, [float(v) for v in ref], rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(p.payments, row)
        received, paid = replay_through_simulator(rule, table, capacity=2)
        np.testing.assert_allclose(received, np.sum([p.shares for p in m.history], axis=0), rtol=1e-12)
        np.testing.assert_array_equal(np.round(paid * 1e6), np.round(m.paid * 1e6))


@two_cpus
def test_several_cpus_refuse_bad_pools():
    with pytest.raises(ValueError, match="distinct"):
        ShareMarket([POOL[0], POOL[0]], "ps", FixedBids([1.0]), [1.0])
    with pytest.raises(ValueError, match="stride scheduling runs one CPU"):
        ShareMarket(POOL, "ps", FixedBids([1.0]), [1.0], enforcement="stride")
    with pytest.raises(ValueError, match="not available"):
        ShareMarket([POOL[0], 10_000], "ps", FixedBids([1.0]), [1.0])
    with pytest.raises(ValueError, match="a CPU number or a list of them, got 'two'"):
        ShareMarket("two", "ps", FixedBids([1.0]), [1.0])
    for pool in (range(POOL[0], POOL[0] + 1), np.array([POOL[0]]), POOL[0]):  # any sequence, or one CPU
        assert ShareMarket(pool, "ps", FixedBids([1.0]), [1.0]).pool == [POOL[0]]


@pytest.mark.parametrize("args, message", [
    (["--cpus", "2", "--host", "0"], "--host names one CPU"),
    (["--cpus", "10000"], "10000 CPUs asked for"),
    (["--cpus", "0"], "0 is not in the range"),
])
def test_cli_refuses_bad_cpus(args, message):
    res = CliRunner().invoke(market, ["share", "--rule", "ps", "--bids", "1,2", *args, "--duration", "1"])
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output


# ---------------------------------------------------------------------------- the page's state and readers
def test_status_delivered_shares_are_cpu_time_fractions_over_the_last_periods():
    """status() against its definition on injected samples (no processes): the rule's fraction is
    the mean of the shares in force over the window normalised, the delivered fraction each job's
    CPU-time difference over the window normalised, the CPUs received that difference over the
    wall time."""
    import numpy as np

    m = ShareMarket(POOL[:1], "ps", FixedBids([3.0, 1.0]), [3.0, 1.0], enforcement="stride")
    assert all(j["delivered"] is None and j["rule"] is None for j in m.status()["jobs"])  # nothing measured yet
    m._round()
    x_a, x_b = np.array([0.75, 0.25]), np.array([0.5, 0.5])
    samples = [(0.0, np.array([0.0, 0.0]), x_a), (1.0, np.array([0.7, 0.3]), x_a), (2.0, np.array([1.2, 0.8]), x_b),
               (3.0, np.array([9.0, 9.0]), x_b)]
    m.usage.extend(samples)
    s = m.status(periods=2)  # the last three samples: periods [1, 2) under x_a and [2, 3) under x_b
    assert s["window"] == 2 and s["rounds"] == 1
    np.testing.assert_allclose([j["rule"] for j in s["jobs"]], (x_a + x_b) / 2)
    d = np.array([9.0, 9.0]) - np.array([0.7, 0.3])
    np.testing.assert_allclose([j["delivered"] for j in s["jobs"]], d / d.sum())
    np.testing.assert_allclose([j["received"] for j in s["jobs"]], d / 2.0)
    assert [j["paid"] for j in s["jobs"]] == [3.0, 1.0] and [j["on"] for j in s["jobs"]] == [POOL[0], POOL[0]]


def test_the_market_reads_every_time_from_its_clock():
    """The CPU-time samples are taken at the injected clock's times (not the machine's), so a test
    drives the CPUs received: CPU seconds over the clock's seconds."""
    import numpy as np

    from marketsched.platform.clock import FakeClock

    clock = FakeClock(100.0)
    m = ShareMarket(POOL[:1], "ps", FixedBids([3.0, 1.0]), [3.0, 1.0], enforcement="stride", clock=clock)
    used = iter([[0.0, 0.0], [1.5, 0.5], [3.0, 1.0]])
    m.cpu_seconds = lambda: np.array(next(used))[:, None]  # no processes: the cgroups' CPU seconds, scripted
    for dt in (0.0, 2.0, 2.0):
        clock.advance(dt)
        m.resplit()
    assert [u[0] for u in m.usage] == [100.0, 102.0, 104.0]
    s = m.status()
    assert s["window"] == 2 and [j["received"] for j in s["jobs"]] == [3.0 / 4.0, 1.0 / 4.0]


def test_the_default_clock_is_unix_time_that_a_clock_change_does_not_step(monkeypatch):
    """The default clock books Unix times, and its differences stay elapsed seconds when the
    system clock is set back (the page's CPUs received divide by them)."""
    from marketsched.platform import clock as clocks

    m = ShareMarket(POOL[:1], "ps", FixedBids([1.0]), [1.0], enforcement="stride")
    assert isinstance(m.clock, clocks.SteadyClock)
    mono = [50.0]
    monkeypatch.setattr(clocks.time, "monotonic", lambda: mono[0])
    monkeypatch.setattr(clocks.time, "time", lambda: 1_000_000.0)
    c = clocks.SteadyClock()
    monkeypatch.setattr(clocks.time, "time", lambda: 1_000_000.0 - 3600.0)  # the system clock set back an hour
    mono[0] += 2.5
    assert c() == 1_000_002.5


def test_the_viewer_token_is_the_only_way_in():
    from marketsched.live.share_page import ShareView
    from marketsched.platform.tokens import hash_token, page_key_id
    from marketsched.platform.validation import MarketError

    v = ShareView(market=None)
    assert len(v.token) >= 32 and ShareView(market=None).token != v.token  # drawn at random
    assert v.authenticate(v.token) == ("viewer", False)
    for bad in (None, "", v.token + "x", hash_token(v.token)):
        with pytest.raises(MarketError, match="token") as e:
            v.authenticate(bad)
        assert e.value.status == 401
    assert v.page_user(page_key_id(hash_token(v.token))) == ("viewer", False, hash_token(v.token))
    assert v.page_user(page_key_id(hash_token("guess"))) is None
    assert v.authenticate_unix(os.geteuid()) == ("viewer", False)
    with pytest.raises(MarketError, match="may not read"):
        v.authenticate_unix(os.geteuid() + 4242)
