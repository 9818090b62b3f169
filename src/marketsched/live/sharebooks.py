"""The books of a live share market (Proportional Share or Sanghavi-Hajek): every period's
pay-as-bid payments as transfers in the live market's ledger, exactly once.

Source: Stößer (2009), section 6.4.1: every second each active request bids ``b_j`` per CPU,
receives its share and pays its bid ``b_j c_j`` (pay-as-bid, whatever it receives); the provider
keeps every payment. The market is :class:`marketsched.live.share.ShareMarket`; this module
holds its money.

Steps of booking period ``k`` (:meth:`ShareBooks.book`, one database transaction):

1. the period's row joins ``share_periods`` (market, round ``k``, time, rule, the bids in
   micro-units, the shares, the payments in micro-units); the key ``(market, round)`` refuses a
   second row for the same period;
2. each job's payment moves from its owner's account (``user:NAME``) to ``provider:revenue``
   (kind ``share``, memo ``"<market> period <k> job <i>"``), refused if it would take the
   balance below 0.

Both commit together or not at all, so a period is paid if and only if it is recorded. After a
crash (kill -9 of the market), the market started again on the same books continues at the
first round not recorded (:meth:`ShareBooks.next_round`): no period is paid twice and none that
was recorded is lost; the periods the market was down for were never played (no shares, no
payments).

Recovery of the jobs: a market that starts on its books records its process and its cgroup
folders (:meth:`ShareBooks.claim`, the database's ``meta`` table). A market started again first
ends what a killed one left (:meth:`ShareBooks.end_leftovers`: its jobs' processes, found by
their cgroups, are killed and the folders removed); while the recorded process is alive, a
second market on the same books is refused.

Decisions
---------
* **Budgets.** The thesis's users have no budget (quasi-linear utility, no constraint on
  spending); the live market's users have balances that must never go negative. A bid is what
  its owner pays for the period, so a job's bid is **capped at its owner's balance** before the
  rule runs (:meth:`ShareBooks.cap`): the rule sees the capped bid, the job receives the share
  that bid gives and pays exactly it. A job whose owner has nothing left bids 0: it gets no
  share (its process is stopped) until money is deposited. A period in which nobody can pay
  anything is not played (nothing recorded, every job stopped).
* **Micro-units.** Bids are taken to whole micro-units (``round(b * 1e6)``, then the cap)
  before the rule, so a payment ``b_j c_j`` is a whole number of micro-units and the books are
  exact: the transfers of a period add up to its recorded payments to the micro-unit.
* **Where the books live.** In the market's own database (SQLite or PostgreSQL, the accounts
  and the statement of ``marketsched market``), beside the ledger's tables, as the day-ahead
  market keeps its rounds. The broker caches balances in memory, so a share market books only a
  data folder no broker is serving (``marketsched market share --data`` checks); the transfers
  show in ``marketsched market statement`` once the broker serves the folder again.
* **One pool size.** The books record the number of CPUs the market shares (the ``meta``
  table); a market on another count is refused, naming both, since ``x_j = min(1, tau_j N)``
  changes with ``N``. Books kept before the count was recorded had one CPU; books with no
  period yet take the count of whoever opens them.
* **Tycoon mode** does not book: its budgets are a credit refilled every interval (Feldman, Lai
  & Zhang 2005 analyse a static game without money flow), so there is no payment to book.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from marketsched.platform.cgroups import JobCgroup
from marketsched.platform.ledger import MICRO, REVENUE, Store, user_account

KIND = "share"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS share_periods (
    market TEXT NOT NULL,
    round INTEGER NOT NULL,
    t REAL NOT NULL,
    rule TEXT NOT NULL,
    owners TEXT NOT NULL,
    bids TEXT NOT NULL,
    shares TEXT NOT NULL,
    payments TEXT NOT NULL,
    PRIMARY KEY (market, round)
)
"""


class ShareBooks:
    """The books of share market ``market`` (a name; restarting with the same name continues its
    books) in ``store``, for jobs owned by ``owners`` (market user names, one per job; the
    users must exist) under ``rule`` ("ps" or "sh") on a pool of ``cpus`` CPUs. See the module
    docstring."""

    def __init__(self, store: Store, market: str, owners, rule: str, cpus: int = 1):
        self.store, self.market, self.rule = store, str(market), str(rule).lower()
        self.owners = [str(o) for o in owners]
        self.cpus = int(cpus)
        if not self.market:
            raise ValueError("a share market's books need a name")
        if self.cpus < 1:
            raise ValueError(f"a share market's books need at least one CPU, got {cpus}")
        if not self.owners:
            raise ValueError("a share market's books need one owner per job")
        known = store.balances()
        missing = [o for o in self.owners if user_account(o) not in known]
        if missing:
            raise ValueError(f"no market user(s) {', '.join(map(repr, missing))} in {store.location}: "
                             "add them with `marketsched market user add`")
        with store.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    store._exec(stmt)
        first = store._rows("SELECT rule, owners FROM share_periods WHERE market = ? ORDER BY round LIMIT 1",
                            (self.market,))
        if first and (first[0][0] != self.rule or json.loads(first[0][1]) != self.owners):
            raise ValueError(f"the books of share market {self.market!r} were kept for rule {first[0][0]} and owners "
                             f"{','.join(json.loads(first[0][1]))}: continue with the same, or name another market")
        # the pool's size is recorded with the books; books kept before it was (no record) had one CPU
        raw = store.get_meta(self._cpus_key())
        kept = (int(raw) if raw is not None else 1) if first else None
        if kept is not None and kept != self.cpus:
            raise ValueError(f"the books of share market {self.market!r} were kept on {kept} CPU(s), this market has "
                             f"{self.cpus}: continue on {kept}, or name another market")
        if raw is None or not first:
            store.set_meta(self._cpus_key(), self.cpus)

    def _meta_key(self) -> str:
        return f"share-market:{self.market}"

    def _cpus_key(self) -> str:
        return f"share-market:{self.market}:cpus"

    def claim(self, track_kind: str | None, dirs) -> None:
        """Record this process and its market's cgroup folders (tracking first) as the books' market."""
        self.store.set_meta(self._meta_key(), json.dumps({"pid": os.getpid(), "track": track_kind,
                                                          "dirs": [str(d) for d in dirs]}))

    def end_leftovers(self) -> list[int]:
        """End what a killed market on these books left: kill its jobs' processes (by their
        cgroups), remove the folders; returns the pids killed. RuntimeError if that market's
        process is still alive (one market per books)."""
        raw = self.store.get_meta(self._meta_key())
        if raw is None:
            return []
        prev = json.loads(raw)
        pid = int(prev["pid"])
        if pid != os.getpid():
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            except PermissionError:
                alive = True
            if alive:
                raise RuntimeError(f"share market {self.market!r} is running already (process {pid})")
        dirs = [Path(d) for d in prev["dirs"]]
        killed: list[int] = []
        if dirs and prev["track"]:
            for job in sorted(p.name for p in dirs[0].glob("job-*") if p.is_dir()):
                cg = JobCgroup.from_paths([str(d / job) for d in dirs], prev["track"])
                killed += cg.pids()
                cg.kill()
                cg.remove()
        for d in reversed(dirs):
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
        with self.store.transaction():
            self.store._exec("DELETE FROM meta WHERE key = ?", (self._meta_key(),))
        return killed

    def next_round(self) -> int:
        """The first round not recorded (0 for new books)."""
        rows = self.store._rows("SELECT MAX(round) FROM share_periods WHERE market = ?", (self.market,))
        return 0 if rows[0][0] is None else int(rows[0][0]) + 1

    def balances(self) -> np.ndarray:
        """Each job's owner's balance (micro-units, per job)."""
        bal = self.store.balances()
        return np.array([bal[user_account(o)] for o in self.owners], dtype=np.int64)

    def cap(self, bids) -> np.ndarray:
        """Bids in whole micro-units (``round(b * 1e6)``), each capped at what its owner can pay
        this period (its balance less what earlier jobs of the same owner bid in it)."""
        micro = np.rint(np.asarray(bids, dtype=np.float64) * MICRO).astype(np.int64)
        with self.store.transaction():  # the balances as committed (the connection is shared by threads)
            have = self.balances()
        left = dict(zip(self.owners, (int(b) for b in have)))
        out = np.zeros(len(micro), dtype=np.int64)
        for i, (o, b) in enumerate(zip(self.owners, micro)):
            out[i] = min(int(b), max(left[o], 0))
            left[o] -= int(out[i])
        return out

    def book(self, k: int, t: float, bids_micro, shares, payments_micro) -> None:
        """Record period ``k`` and post its payments, in one transaction (module docstring)."""
        pay = [int(p) for p in payments_micro]
        with self.store.transaction():
            self.store._exec(
                "INSERT INTO share_periods (market, round, t, rule, owners, bids, shares, payments) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (self.market, int(k), float(t), self.rule, json.dumps(self.owners),
                 json.dumps([int(b) for b in bids_micro]), json.dumps([float(x) for x in shares]), json.dumps(pay)))
            for i, (o, p) in enumerate(zip(self.owners, pay)):
                if p <= 0:
                    continue
                if self.store.balance(user_account(o)) < p:
                    raise ValueError(f"share market {self.market!r} period {k}: {o} cannot pay {p / MICRO:g}")
                self.store.post(t, KIND, user_account(o), REVENUE, p, memo=f"{self.market} period {k} job {i}")

    def periods(self) -> list[dict]:
        """The recorded periods, in round order: round, t, bids and payments (micro-units), shares."""
        rows = self.store._rows("SELECT round, t, bids, shares, payments FROM share_periods WHERE market = ? "
                                "ORDER BY round", (self.market,))
        return [{"round": int(r), "t": t, "bids": json.loads(b), "shares": json.loads(x), "payments": json.loads(p)}
                for r, t, b, x, p in rows]

    def transfers(self) -> np.ndarray:
        """What each job has paid by the ledger: the sum of its ``share`` entries (micro-units)."""
        out = np.zeros(len(self.owners), dtype=np.int64)
        prefix = f"{self.market} period "
        for e in self.store._rows("SELECT memo, amount FROM entries WHERE kind = ? AND memo LIKE ?",
                                  (KIND, prefix + "%")):
            memo, amount = e
            rest = memo[len(prefix):].split(" job ")
            out[int(rest[1])] += int(amount)
        return out

    def check(self) -> dict:
        """The books against the record and the simulator: the double entry holds
        (:meth:`~marketsched.platform.ledger.Store.check_books`); the recorded rounds are 0, 1,
        ... with none missing or twice; each job's transfers add up to its recorded payments
        to the micro-unit; and the recorded bids replayed through the simulator's share market
        (:func:`marketsched.live.share.replay_through_simulator`) charge the same payments.
        Returns ``{"periods", "paid"}`` (paid per job, micro-units); AssertionError naming the
        first difference."""
        from marketsched.live.share import replay_through_simulator

        self.store.check_books()
        periods = self.periods()
        rounds = [p["round"] for p in periods]
        if rounds != list(range(len(rounds))):
            raise AssertionError(f"share market {self.market!r}: recorded rounds {rounds} are not 0..{len(rounds) - 1}")
        recorded = np.sum([p["payments"] for p in periods], axis=0, dtype=np.int64) if periods \
            else np.zeros(len(self.owners), dtype=np.int64)
        booked = self.transfers()
        if not np.array_equal(booked, recorded):
            raise AssertionError(f"share market {self.market!r}: transfers {booked.tolist()} differ from the recorded "
                                 f"payments {recorded.tolist()} (micro-units)")
        if periods:
            bids = np.array([p["bids"] for p in periods], dtype=np.float64) / MICRO
            _, sim = replay_through_simulator(self.rule, bids, capacity=self.cpus)
            sim_micro = np.rint(sim * MICRO).astype(np.int64)
            if not np.array_equal(sim_micro, recorded):
                raise AssertionError(f"share market {self.market!r}: the simulator charges {sim_micro.tolist()} for the "
                                     f"recorded bids, the books {recorded.tolist()} (micro-units)")
        return {"periods": len(periods), "paid": recorded}
