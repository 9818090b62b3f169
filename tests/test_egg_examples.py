"""Kang & Parkes (2007): the paper's worked examples as exact tests.

Example 1 (section 2.4): an admissible price-table update, and two variants that definition 6 rejects.
Example 2 (section 3): price lookup: slot [t0+2, t0+3), price 13, surplus 4.
Sample bid (section 2.2): linear value 10 -> 2 with the misprint corrected.
Reliability indifference (section 2.2, after definition 2).
"""

import numpy as np
import pytest

from marketsched.mechanisms.online.egg import (
    AdmissibilityError,
    Bid,
    BidBatch,
    EstimatorStore,
    Linear,
    LinearEstimator,
    Market,
    PriceBook,
    PriceTable,
    ReliabilityLedger,
    Steps,
    clear,
)
from marketsched.mechanisms.online.egg.price_table import RULE_LOCKED, RULE_MONOTONE, RULE_VALUE

MEMORY_EDGES = [0.0, 2.0, 4.0, 8.0]  # MB: rows [0,2), [2,4), [4,8)
EX1_OLD = np.array([[5, 4, 6, 10], [17, 13, 15, 12], [20, 15, 21, 25]], dtype=float)
EX1_NEW = np.array([[8, 4, 7, 4], [18, 17, 15, 16], [24, 18, 100, 18]], dtype=float)
EX2 = np.array([[9, 5, 4, 6], [19, 17, 13, 15], [24, 20, 15, 21]], dtype=float)


def example1_table(t0=0.0):
    # hour-long completion columns [t0, t0+1) ... [t0+3, t0+4); Delta = 3 hours
    return PriceTable.create([MEMORY_EDGES], slot=1.0, delta=3.0, horizon=4, prices=EX1_OLD, start=t0)


# ----------------------------------------------------------------------------- example 1
def test_example1_update_is_accepted():
    t = example1_table()
    t.update(EX1_NEW, at=0.0)
    np.testing.assert_array_equal(t.prices, EX1_NEW)
    assert t.book.updates == 1 and t.book.rejected == 0


def test_example1_locked_window_is_first_three_columns():
    t = example1_table()
    np.testing.assert_array_equal(t.book.locked_columns(0.0), [True, True, True, False])
    # the fourth column may be lowered to 4, 16, 18 (the paper's words), the others may not
    assert t.violations(np.column_stack([EX1_OLD[:, :3], [4, 16, 18]]), at=0.0) == []


@pytest.mark.parametrize("row,col", [(r, c) for r in range(3) for c in range(3)])
def test_example1_any_decrease_in_locked_columns_is_rejected(row, col):
    t = example1_table()
    bad = EX1_NEW.copy()
    bad[row, col] = EX1_OLD[row, col] - 1  # e.g. 17 -> 16
    if row < 2:  # keep the column monotone in memory so only rule 2 is broken
        bad[: row + 1, col] = np.minimum(bad[: row + 1, col], bad[row, col])
    with pytest.raises(AdmissibilityError) as err:
        t.update(bad, at=0.0)
    v = [x for x in err.value.violations if x.cell == (row, col) and x.rule == RULE_LOCKED]
    assert v and v[0].other == EX1_OLD[row, col] and v[0].new == bad[row, col]
    assert f"slot {col}" in str(err.value)
    np.testing.assert_array_equal(t.prices, EX1_OLD)  # nothing changed


def test_example1_note_cases_17_to_16_and_nonmonotone_column():
    t = example1_table()
    bad = EX1_NEW.copy()
    bad[1, 0] = 16  # 17 -> 16 in the first column (still >= 8 above it)
    with pytest.raises(AdmissibilityError, match="fall from 17 to 16"):
        t.update(bad, at=0.0)
    bad = EX1_NEW.copy()
    bad[:, 3] = [4, 3, 18]  # fourth column not monotone in memory
    with pytest.raises(AdmissibilityError) as err:
        t.update(bad, at=0.0)
    (v,) = err.value.violations
    assert v.rule == RULE_MONOTONE and v.cell == (1, 3) and v.new == 3 and v.other == 4 and v.axis == 0


def test_example1_both_tables_monotone_in_memory():
    for table in (EX1_OLD, EX1_NEW, EX2):
        assert np.all(np.diff(table, axis=0) >= 0)


def test_closed_window_would_lock_the_fourth_column():
    # decision 2: with the closed window of definition 6 as printed (tau <= t + Delta) the
    # column [t0+3, t0+4) would be locked and example 1 rejected; our half-open window frees
    # it, but only just: an update a moment later locks it.
    t = example1_table()
    assert t.book.locked_columns(1e-9)[3]
    with pytest.raises(AdmissibilityError):
        t.update(EX1_NEW, at=1e-9)


def test_nan_and_negative_prices_are_rejected():
    t = example1_table()
    for v in (np.nan, -1.0):
        bad = EX1_NEW.copy()
        bad[0, 3] = v
        with pytest.raises(AdmissibilityError) as err:
            t.update(bad, at=0.0)
        assert err.value.violations[0].rule == RULE_VALUE


# ----------------------------------------------------------------------------- example 2
def example2_market():
    """Example 2 through the whole infrastructure: memory estimate 2.5 MB, no run time."""
    book = PriceBook(1, [MEMORY_EDGES], slot=1.0, delta=3.0, horizon=4, prices=EX2[None])
    est = EstimatorStore([LinearEstimator([2.5], [[0.0]])], delta=3.0, runtime_dim=None)
    return Market(book, est, ReliabilityLedger(1))


def test_example2_slot_2_price_13_surplus_4():
    m = example2_market()
    # w([t0, t0+2]) = 19, w([t0+2, t0+3]) = 17, w([t0+3, t0+Delta]) = 0
    bid = Bid(np.array([1.0]), Steps([0.0, 2.0, 3.0], [19.0, 17.0]))
    out, entry = m.submit(BidBatch.from_bids([bid], 0.0), menu=True)
    assert out.provider[0] == 0
    assert out.slot[0] == 2  # column [t0+2, t0+3)
    assert out.completion[0] == 2.0  # "the scheduled completion time of 2 hours from now"
    assert out.price[0] == 13.0
    assert out.surplus[0] == 4.0 and out.value[0] == 17.0
    assert out.row[0] == 1  # memory row [2, 4)
    assert m.escrow.held == 13.0 and entry[0] == 0


def test_example2_row_surpluses_0_2_4():
    # "the auctioneer examines the row 19, 17, 13": surpluses 19-19, 19-17, 17-13
    book = example2_market().book
    sched = Steps([0.0, 2.0, 3.0], [19.0, 17.0])
    surplus = [float(sched.value_at(s)) - book.table(0).price([2.5], s) for s in (0.0, 1.0, 2.0)]
    assert surplus == [0.0, 2.0, 4.0]
    # 15 in the fourth column is beyond the deadline: value 0 there
    assert float(sched.value_at(3.0)) == 0.0


def test_example2_with_run_time_keeps_the_answer():
    # a run time below one hour leaves the answer unchanged; 2.5 h forces slot 2 anyway;
    # 3 h makes the job infeasible (w(3) = 0)
    for r, expect in ((0.5, (2, 13.0)), (2.5, (2, 13.0)), (3.0, None)):
        book = PriceBook(1, [[0.0, 2.0, 4.0, 8.0], [0.0, 10.0]], 1.0, 3.0, 4, prices=EX2[None, :, None, :])
        est = EstimatorStore([LinearEstimator([2.5, r], [[0.0], [0.0]])], 3.0, runtime_dim=1)
        out, _ = Market(book, est).submit(BidBatch.from_bids([Bid(np.array([1.0]), Steps([0, 2, 3], [19, 17]))], 0.0))
        if expect is None:
            assert not out.scheduled[0]
        else:
            assert (out.slot[0], out.price[0]) == expect
            assert out.completion[0] == max(2.0, r)


def test_example2_not_scheduled_when_every_price_exceeds_value():
    m = example2_market()
    out, entry = m.submit(BidBatch.from_bids([Bid(np.array([1.0]), Steps([0, 2, 3], [12.0, 12.0]))], 0.0))
    assert not out.scheduled[0] and entry[0] == -1 and m.escrow.collected == 0.0


def test_zero_surplus_is_scheduled():
    m = example2_market()
    out, _ = m.submit(BidBatch.from_bids([Bid(np.array([1.0]), Steps([0, 3], [13.0]))], 0.0))
    assert out.scheduled[0] and out.surplus[0] == 0.0 and out.price[0] == 13.0


# ----------------------------------------------------------------------------- sample bid
def test_sample_bid_linear_10_to_2():
    t0, td = 100.0, 200.0
    w = Linear(10.0, 2.0, t0, td)
    np.testing.assert_allclose(w.value_at([t0, 150.0, td, td + 1]), [10.0, 6.0, 2.0, 0.0])
    assert w.deadline == td
    # the misprinted formula (2 + 8 (td - tau)) / (td - t0) gives 0.82 at t0, not 10
    assert (2 + 8 * (td - t0)) / (td - t0) != 10.0
    b = BidBatch.from_bids([Bid(np.array([1.0]), w, min_reliability=0.99)], t0)
    np.testing.assert_allclose(b.values(np.array([[t0, 150.0, td, td + 1]])), [[10.0, 6.0, 2.0, 0.0]])
    assert b.min_reliability[0] == 0.99


def test_reliability_93_and_95_are_equivalent_at_90():
    # two identical providers, reliabilities 93% and 95%; a user with gamma = 90% is
    # indifferent: the tie-break (earliest, cheapest, lowest index) decides, not reliability
    book = PriceBook(2, [MEMORY_EDGES], 1.0, 3.0, 4, prices=np.stack([EX2, EX2]))
    est = EstimatorStore([LinearEstimator([2.5], [[0.0]])] * 2, 3.0, runtime_dim=None)
    ledger = ReliabilityLedger(2, alpha=1.0, beta=1.0)
    ledger.record(np.repeat([0, 1], [100, 100]), np.r_[np.arange(100) < 92, np.arange(100) < 96], 0.0)
    rel = ledger.reliability()
    np.testing.assert_allclose(rel, [93 / 102, 97 / 102])
    assert rel[0] >= 0.9 and rel[1] >= 0.9 and rel[1] > rel[0]
    m = Market(book, est, ledger)
    bid = Bid(np.array([1.0]), Steps([0, 2, 3], [19.0, 17.0]), min_reliability=0.9)
    out, _ = m.submit(BidBatch.from_bids([bid], 0.0), menu=True)
    assert out.provider[0] == 0  # lower index wins the exact tie
    np.testing.assert_array_equal(out.menu_surplus[0], [4.0, 4.0])
    # raising the threshold to 95% leaves only provider 1
    out, _ = m.submit(BidBatch.from_bids([Bid(bid.description, bid.schedule, 0.95)], 0.0))
    assert out.provider[0] == 1


def test_clear_rejects_bids_before_the_book():
    book = example2_market().book
    book.roll(1.5)
    b = BidBatch.from_bids([Bid(np.array([1.0]), Steps([0, 2, 3], [19, 17]))], 1.0)
    with pytest.raises(ValueError, match="before the book's clock"):
        clear(b, book, np.array([[[2.5]]]))
