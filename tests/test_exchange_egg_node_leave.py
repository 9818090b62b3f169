"""Egg mode of the exchange when one node of a provider leaves (:func:`marketsched.exchange.egg.cut_to_nodes`):
the provider's table is cut to what its remaining nodes can hold beside its open contracts, recorded as a
price-table event that the replay applies; the last node leaving withdraws the table.

The reference kept plain: EDF's test written out job by job (a new job of the bucket's upper run-time edge,
due in a column, fits iff in every column from it on the work due by that column's end, its own included,
is at most the remaining CPUs times the time to that end)."""

from __future__ import annotations

import math

import numpy as np

from marketsched.exchange import egg
from test_exchange_egg import act, bid, egg_exchange

HOUR = 3600.0
EDGES = [0, 1800, 3600, 10800]  # run-time buckets (s)
FLAT = [[2.0] * 6, [3.0] * 6, [7.0] * 6]  # a static table: every column offered


def rt_exchange(path, nodes):
    """An Egg exchange on run-time buckets (``EDGES``), hour slots, patience 2, six columns; provider p1
    with ``nodes`` (name -> CPU units) and a flat table; user u1 with 1000 deposited."""
    cfg = egg.default_settings(patience_slots=2, horizon_slots=6, edges=[EDGES])
    (first, cpu), *rest = nodes.items()
    ex, clock, machines = egg_exchange(path, cfg=cfg, providers=("p1",), node=(cpu, 100))
    with ex.store.transaction():
        ex.store.conn.execute("UPDATE ex_nodes SET name = ? WHERE provider = 'p1'", (first,))
    for name, cpu in rest:
        ex.add_node("p1", name, cpu, 100)
    ex.deposit("u1", 1000)
    act(ex, egg.post_prices, "p1", FLAT)
    return ex, clock, machines


def table(ex) -> np.ndarray:
    (p,) = egg.reliability(ex.egg, ex.clock())
    return np.array([[math.inf if x is None else x for x in row] for row in p["prices"]])


def test_a_bid_only_the_node_that_left_could_run_is_not_awarded(tmp_path):
    """p1 has nodes n and m of one CPU unit each. A 3000 s job runs on n until 3000 s; at 60 s node m
    leaves. A 1000 s job due within the first hour could only have run on m: before the cut the
    auctioneer awarded it and its contract failed (no node with room, the provider's reliability down);
    now the first column is cut and the bid finds no provider, nothing moves. The cut is a price-table
    event naming the node, and the replay gives the recorded choices."""
    ex, clock, machines = rt_exchange(tmp_path / "x.db", {"n": 1, "m": 1})
    first = bid(ex, "u1", description=[3000], value=10, deadline=2 * HOUR)
    assert (first["tau"], first["price"]) == (3000.0, 3.0)
    ex.tick()
    assert [c["state"] for c in egg.contracts(ex.store)] == ["running"]
    clock.advance(60)
    ex.leave("p1", "m")
    # capacity 1 CPU from 60 s: 3540 CPU-seconds by the first hour's end, 2940 of them held by the
    # first job: room 600 there, too little for any bucket; then 4200, 7800, 11400 by the next ends.
    # An award in a column may be due at its start: a column has the room of the one before
    before = ex.store.balances()
    got = bid(ex, "u1", description=[1000], value=10, deadline=1800)
    assert got["scheduled"] is False
    assert ex.store.balances() == before and len(egg.contracts(ex.store)) == 1
    cut = np.isinf(table(ex))
    assert cut[:2, :2].all() and not cut[:2, 2:].any() and cut[2, :4].all() and not cut[2, 4:].any()
    rows = ex.store.rows("SELECT data FROM ex_egg_events WHERE kind = 'prices' ORDER BY id")
    assert len(rows) == 2 and '"node_left": "m"' in rows[-1][0]
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def test_the_last_node_leaving_withdraws_the_table_and_a_node_that_frees_nothing_cuts_nothing(tmp_path):
    """Node m leaves while n is idle and has room for every bucket p1 offered in every column but the
    largest bucket's two nearest ones: only those are cut. Then n leaves too: no node is left, the table is
    withdrawn (every cell not offered) as when the provider leaves, and no bid is awarded to p1."""
    ex, clock, _ = rt_exchange(tmp_path / "x.db", {"n": 2, "m": 1})
    clock.advance(60)
    ex.leave("p1", "m")
    cut = np.isinf(table(ex))
    # 2 CPUs, nothing held: room 2 x (3600 - 60) = 7080 by the first column's end, 14280 by the second's
    assert not cut[:2].any() and cut[2, :2].all() and not cut[2, 2:].any()
    ex.leave("p1", "n")
    assert np.isinf(table(ex)).all()
    assert bid(ex, "u1", description=[1000], value=100, deadline=2 * HOUR)["scheduled"] is False
    rows = ex.store.rows("SELECT data FROM ex_egg_events WHERE kind = 'prices' ORDER BY id")
    assert '"withdrawn": true' in rows[-1][0] and '"node_left": "n"' in rows[-1][0]
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def test_without_a_run_time_axis_only_the_columns_with_no_room_are_cut(tmp_path):
    """Kang & Parkes's example 2 geometry (memory buckets, no run-time axis): p1's job on node n holds
    its CPU unit until tau* = 2 h; node m leaves at 60 s. A job's work is unknown, so the columns
    ending by 2 h (no room at all) and the one starting at 2 h (an award there may be due at 2 h) are
    cut in every bucket and the last keeps its prices; a bid due before 3 h finds no provider."""
    from test_exchange_egg import EXAMPLE

    ex, clock, _ = egg_exchange(tmp_path / "x.db", node=(1, 100))
    ex.add_node("p1", "m", 1, 100)
    ex.deposit("u1", 100)
    act(ex, egg.post_prices, "p1", EXAMPLE)
    assert bid(ex, "u1", until=[2 * HOUR, 3 * HOUR], values=[19, 17])["tau"] == 2 * HOUR
    ex.tick()
    clock.advance(60)
    ex.leave("p1", "m")
    assert bid(ex, "u1", value=30, deadline=3 * HOUR - 120)["scheduled"] is False  # due before 3 h
    got = table(ex)
    assert np.isinf(got[:, :3]).all() and np.array_equal(got[:, 3], np.array(EXAMPLE, float)[:, 3])
    assert egg.replay(ex.store) == egg.recorded(ex.store)
    ex.store.check_books()


def fits(works_due: list[tuple[float, int]], capacity: int, ends: np.ndarray, now: float, w: float, s: int) -> bool:
    """Reference: EDF's test, job by job, for a new job of work ``w`` awarded in column ``s``, so due
    as early as the column's start (the end of column ``s - 1``; column 0: its own end)."""
    s = max(s - 1, 0)
    jobs = works_due + [(w, s)]
    for c in range(s, len(ends)):
        due = sum(work for work, col in jobs if col <= c)
        if due > capacity * (ends[c] - now):
            return False
    return True


def test_the_cut_equals_edfs_test_on_random_providers_with_ties(tmp_path):
    """Random providers (two or three nodes of 1-3 CPU units), random awarded jobs (run times on a
    coarse grid, so many share ``tau*``), one node leaves at a random time: every cell of the cut table
    is offered iff it was offered before and a job of its bucket fits the remaining nodes beside the
    open contracts on them by the reference; the replay matches."""
    rng = np.random.default_rng(7)
    for case in range(12):
        names = ["a", "b", "c"][: int(rng.integers(2, 4))]
        nodes = {n: int(rng.integers(1, 4)) for n in names}
        ex, clock, _ = rt_exchange(tmp_path / f"{case}.db", nodes)
        for _ in range(int(rng.integers(1, 6))):
            bid(ex, "u1", description=[float(rng.choice([600, 1200, 1800, 3000]))], value=20,
                deadline=float(rng.choice([HOUR, 2 * HOUR, 3 * HOUR])), cpu=int(rng.integers(1, 3)))
        ex.tick()
        clock.advance(float(rng.choice([0, 60, 600, 1200])))
        ex.tick()
        old = table(ex)
        leaving = str(rng.choice(names))
        ex.leave("p1", leaving)
        now = clock()
        left = {n: c for n, c in nodes.items() if n != leaving}
        ids = {nid for (nid,) in ex.store.rows("SELECT id FROM ex_nodes WHERE left_t IS NULL")}
        base = math.floor(now / HOUR)
        ends = (base + 1 + np.arange(6)) * HOUR
        held = [(c["cpu"] * max(c["tau"] - now, 0.0), min(max(math.ceil(c["tau"] / HOUR) - 1 - base, 0), 5))
                for c in egg.contracts(ex.store, egg.OPEN) if c["node_id"] in ids]
        want = old.copy()
        for b, upper in enumerate(EDGES[1:]):
            for s in range(6):
                if not fits(held, sum(left.values()), ends, now, upper, s):
                    want[b, s] = math.inf
        assert np.array_equal(table(ex), want), (case, nodes, leaving, held)
        assert egg.replay(ex.store) == egg.recorded(ex.store)
        ex.store.check_books()
        ex.store.close()
