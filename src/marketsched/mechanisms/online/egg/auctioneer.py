"""The per-bid auctioneer: equations 3-5 of Kang & Parkes (2007, section 3).

On receiving bid ``(J, a, w, gamma)`` (all reported), the single-use auctioneer:

1. (a) ``d`` = latest ``tau`` with ``w(tau) > 0``;
2. (b) for each provider ``k`` with reliability ``>= gamma`` (and in the user's view):
   i. ``Q_k = R_k^a(J)`` (the infrastructure evaluates the stored estimator); ``r_k`` its
      run-time component;
   ii. eq. 3: ``tau*_k`` = the *earliest* ``tau`` in ``[a + r_k, d]`` maximising
       ``w(tau) - phi_k^a(Q_k, tau)``;
3. (c) eq. 4: ``k*`` = a provider with maximal ``w(tau*_k) - phi_k^a(Q_k, tau*_k)``;
   eq. 5: the price is ``p = phi_{k*}^a(Q_{k*}, tau*_{k*})``. The job is not scheduled if
   every provider's price exceeds the value.

Implementation (vectorised over bids x providers x slots)
--------------------------------------------------------
Prices are constant on a slot column and value schedules are non-increasing
(:mod:`~marketsched.mechanisms.online.egg.bids`), so the earliest maximiser inside column
``s`` is its earliest feasible point ``max(start(s), a + r_k)``: only the column containing
``a + r_k`` is evaluated inside, every later column at its start. For a chunk of bids the
auctioneer gathers every provider's row into a ``(bids, providers, columns)`` array, masks
infeasible cells with ``-inf`` and takes ``argmax`` along columns (the first maximum is the
earliest time: eq. 3's tie rule), then chooses the provider.

A cell is feasible iff: the provider is eligible (view, reliability ``>= gamma``, active), the
resource bucket is offered (finite price), the column is at or after the one containing
``a + r_k``, the completion time is before the patience horizon ``a + Delta`` (half-open,
decision 2) and the reported value there is ``> 0`` (``tau <= d``).

Decisions (open in the paper)
-----------------------------
* **Ties within a provider:** earliest completion time (the paper's rule).
* **Ties across providers** (the paper gives none): earliest completion time ``tau*``, then
  the lower provider index. (Equal surplus at an equal time means an equal price: the value
  is the same bid's ``w(tau*)``, so "then the lower price" would never decide.)
  Deterministic; any fixed rule that does not depend on the bid beyond the menu keeps
  truthfulness.
* **Zero surplus is scheduled**: the paper leaves a job out only "if all resource providers
  have prices higher than value"; ``w - p = 0`` is scheduled.
* Ties are exact float equality (prices and values are compared as given).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marketsched.mechanisms.online.egg.bids import KIND_STEPS, BidBatch
from marketsched.mechanisms.online.egg.price_table import PriceBook

#: elements of the (bids x providers x columns) working array per chunk
CHUNK_CELLS = 1 << 20


@dataclass(frozen=True, eq=False)
class Outcome:
    """Result of clearing a batch of bids (row ``b`` = bid ``b``).

    ``provider`` is ``k*`` (-1: not scheduled); ``slot`` the absolute price column;
    ``completion`` the scheduled completion time ``tau*`` (the provider's deadline and the
    result's release time); ``price`` eq. 5; ``value`` the *reported* value at ``tau*``;
    ``surplus = value - price``; ``runtime`` and ``row`` the winner's run-time estimate and
    resource bucket. ``menu_*`` (optional, (B, K)): every provider's ``tau*_k``, price and
    surplus (``-inf`` where it offers nothing feasible).
    """

    provider: np.ndarray
    slot: np.ndarray
    completion: np.ndarray
    price: np.ndarray
    value: np.ndarray
    surplus: np.ndarray
    runtime: np.ndarray
    row: np.ndarray
    menu_completion: np.ndarray | None = None
    menu_price: np.ndarray | None = None
    menu_surplus: np.ndarray | None = None

    @property
    def scheduled(self) -> np.ndarray:
        return self.provider >= 0

    def __len__(self) -> int:
        return int(self.provider.shape[0])


def auctioneer_kernel():
    """The compiled twin of :func:`clear` for linear value schedules (``clear`` in
    ``_auctioneer_kernel.c``: the same steps bid by bid, every number bit for bit), or None when
    ``MARKETSCHED_ENGINE`` chooses Python or the module is not built
    (:func:`marketsched.engine.compiled.kernel`)."""
    from marketsched.engine.compiled import kernel

    return kernel("marketsched.mechanisms.online.egg._auctioneer_kernel")


def clear(bids: BidBatch, book: PriceBook, Q: np.ndarray, eligible: np.ndarray | None = None,
          runtime: np.ndarray | None = None, patience: float | None = None, menu: bool = False,
          chunk_cells: int = CHUNK_CELLS, fast: bool = True) -> Outcome:
    """Run equations 3-5 for every bid against the book's current tables.

    Parameters
    ----------
    bids:
        Reported bids; ``bids.arrival`` must not precede the book's clock. Each bid is priced
        from the tables as they are now (the caller clears the bids of one instant, or of an
        interval without table updates, per call: providers update only between bids).
    book:
        Every provider's price table (rolled to the current time).
    Q:
        ``(B, K, L)`` resource estimates ``R_k^a(J_b)``.
    eligible:
        ``(B, K)`` boolean: view, reliability ``>= gamma_hat``, activity. Default: all.
    runtime:
        ``(B, K)`` run-time estimates ``r_k`` (default 0: no run-time component).
    patience:
        ``Delta`` (default ``book.delta``): completion must be before ``a + Delta``.
    menu:
        Also return every provider's best entry (for audits).
    fast:
        Clear bids with linear schedules in the compiled kernel (:func:`auctioneer_kernel`) when
        it is built and no menu is asked for; ``False`` runs the array code below (the reference).
    """
    B = len(bids)
    K = book.n_providers
    H = book.horizon
    Q = np.asarray(Q, dtype=np.float64)
    if Q.ndim != 3 or Q.shape[:2] != (B, K):
        raise ValueError(f"clear: Q must have shape ({B}, {K}, L), got {Q.shape}")
    if runtime is None:
        runtime = np.zeros((B, K))
    runtime = np.asarray(runtime, dtype=np.float64)
    if eligible is None:
        eligible = np.ones((B, K), dtype=bool)
    eligible = np.asarray(eligible, dtype=bool)
    if eligible.shape != (B, K):
        raise ValueError(f"clear: eligible must have shape ({B}, {K}), got {eligible.shape}")
    arrival = bids.arrival
    delta = book.delta if patience is None else float(patience)
    ints = np.full((3, B), -1, np.int64)
    out_k, out_slot, out_row = ints  # rows of one array each: fewer allocations
    nums = np.full((4, B), np.nan)
    out_tau, out_price, out_value, out_r = nums
    out_surplus = np.full(B, -np.inf)
    kern = auctioneer_kernel() if fast and not menu and B else None
    if (kern is not None and runtime.shape == (B, K) and Q.shape[2] == len(book.edges)
            and (bids.step_breaks is None or not (bids.kind == KIND_STEPS).any())):
        # the kernel checks what the array code below checks (run times, estimates, arrivals)
        def f64(x):
            return np.ascontiguousarray(x, dtype=np.float64)

        hz = bids.horizon
        kern.clear(f64(arrival), f64(bids.v_start), f64(bids.v_end), f64(bids.t0), f64(bids.t_deadline),
                   b"" if hz is None else f64(hz), f64(runtime), f64(Q), book.upper_edges, f64(book.prices),
                   book.bucket_counts, np.ascontiguousarray(eligible).view(np.uint8), K, Q.shape[2], H, book.base,
                   book.slot, delta, book.now, hz is not None, out_k, out_slot, nums, out_surplus, out_row)
        return Outcome(out_k, out_slot, out_tau, out_price, out_value, out_surplus, out_r, out_row)
    if runtime.shape != (B, K) or not ((runtime >= 0) & (runtime < np.inf)).all():  # NaN fails both
        raise ValueError(f"clear: runtime must be finite, >= 0 and of shape ({B}, {K})")
    if B and arrival.min() < book.now:
        i = int(np.argmin(arrival))
        raise ValueError(f"clear: bid {i} arrives at {arrival[i]}, before the book's clock {book.now} "
                         "(prices must be quoted at the arrival)")
    rows = book.bucket_index(Q)
    fp = book.flat_prices()
    starts_all = book.slot_starts
    slot = book.slot
    base = book.base

    if menu:
        m_tau = np.full((B, K), np.nan)
        m_price = np.full((B, K), np.nan)
        m_surplus = np.full((B, K), -np.inf)

    # one extra row of +inf: "not offered" (bucket above the top edge) gathers from it
    R = fp.shape[1]
    fpp = np.concatenate([fp, np.full((K, 1, H), np.inf)], axis=1)
    rows = np.where(rows < 0, R, rows)
    # process bids sorted by their last usable column, so each chunk spans few columns (one chunk:
    # in their own order; a bid's answer never depends on the others in its chunk)
    last = np.floor(np.maximum(np.minimum(arrival + delta, bids.deadlines() + slot), arrival) / slot).astype(np.int64)
    step = max(1, int(chunk_cells // max(1, K * H)))
    order = np.argsort(last, kind="stable") if B > step else np.arange(B)
    kk = np.arange(K)[None, :]
    for i0 in range(0, B, step):
        i1 = min(B, i0 + step)
        c = order[i0:i1]
        bc = bids if (i0 == 0 and i1 == B) else bids.take(c)
        a = arrival[c]
        n = i1 - i0
        # columns any bid of the chunk can use: from the arrival's slot to the last usable one
        hmin = int(np.floor(a.min() / slot)) - base
        hmax = min(H, int(last[c].max()) - base + 1)
        if hmax <= hmin:
            continue
        st = starts_all[hmin:hmax]
        h = hmax - hmin
        r = rows[c]
        P = fpp[:, :, hmin:hmax][kk, r]  # (n, K, h)
        hz = a + delta  # patience horizon (exclusive)
        x = a[:, None] + runtime[c]  # earliest completion per provider
        f = np.floor(x / slot).astype(np.int64) - (base + hmin)  # column holding x (relative)
        # value at each column start (later columns) and at x (first feasible column): one call
        both = bc.values(np.concatenate([np.maximum(st[None, :], a[:, None]), x], axis=1))  # (n, h + K)
        Vs, vx = both[:, :h], both[:, h:]  # views: the masks below write into ``both``
        Vs[(Vs <= 0) | (st[None, :] >= hz[:, None])] = -np.inf
        vx[(vx <= 0) | (x >= hz[:, None])] = -np.inf
        S = np.full((n, K, h), -np.inf)
        np.subtract(Vs[:, None, :], P, out=S, where=np.arange(h)[None, None, :] > f[:, :, None])
        bi = np.arange(n)[:, None]
        inside = (f >= 0) & (f < h)
        fi = np.minimum(np.maximum(f, 0), h - 1)  # integers: np.clip's result, without its wrapper
        S[bi, kk, fi] = np.where(inside, vx - P[bi, kk, fi], S[bi, kk, fi])  # -inf - inf = -inf, never NaN
        hb = S.argmax(axis=2)  # eq. 3: first maximum = earliest column
        sb = S[bi, kk, hb]
        sb[~eligible[c]] = -np.inf
        pb = P[bi, kk, hb]
        tb = np.where(hb == f, x, st[hb])
        ok = np.isfinite(sb)
        # eq. 4 with the documented tie-break: surplus, then earliest tau*, then lower index
        smax = np.where(ok, sb, -np.inf).max(axis=1)
        cand = ok & (sb == smax[:, None])
        tmin = np.where(cand, tb, np.inf).min(axis=1)
        cand &= tb == tmin[:, None]
        kstar = cand.argmax(axis=1)
        win = np.isfinite(smax) & (smax >= 0)
        idx = np.nonzero(win)[0]
        kw = kstar[idx]
        g = c[idx]
        out_k[g] = kw
        out_slot[g] = base + hmin + hb[idx, kw]
        out_tau[g] = tb[idx, kw]
        out_price[g] = pb[idx, kw]
        out_surplus[g] = sb[idx, kw]
        out_value[g] = sb[idx, kw] + pb[idx, kw]
        out_r[g] = runtime[g, kw]
        out_row[g] = r[idx, kw]
        if menu:
            m_tau[c] = np.where(ok, tb, np.nan)
            m_price[c] = np.where(ok, pb, np.nan)
            m_surplus[c] = np.where(ok, sb, -np.inf)
    return Outcome(out_k, out_slot, out_tau, out_price, out_value, out_surplus, out_r, out_row,
                   m_tau if menu else None, m_price if menu else None, m_surplus if menu else None)
