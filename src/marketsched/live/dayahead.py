"""The day-ahead reservation auction as a service (Mutz 2008, chapter 5; chapter 7 relaxed).

Users place **sealed bids** during the day: a length (s), a deadline (s from the start of the
reserved period), a maximum price (the bid's value, currency units; the thesis's ``placebid``),
a node count for the relaxed variant, and optionally the command to run in the reservation. At a
configured **clearing time** the service runs the library's auction on every sealed bid of the
round, :class:`~marketsched.mechanisms.clearing.dpgva.DPGVA` (whole machine, dynamic programme,
optimal) or :class:`~marketsched.mechanisms.clearing.relaxed_dpgva.RelaxedDPGVA` (n nodes per
bid, random-restart greedy search of depth D), charges the **Clarke prices** (GVA payments,
section 5.1.3: ``W(-i) - (W - v_i)``) in the broker's double-entry ledger and makes the
**reservations**: Slurm reservations (``scontrol create reservation``) on the Slurm executor,
held slots on the local one. ``showres`` lists bids, outcomes and reservations (thesis: the
``showres`` command).

Rules of the service (decisions; the thesis's server assumes them or leaves them open)
--------------------------------------------------------------------------------------
* **Rounds.** Round r clears at ``clear_at + r * repeat`` and reserves the period starting at
  ``period_start + r * repeat`` (``horizon`` s long, time slotted by ``granularity``; the
  library rounds lengths up and deadlines down to it). A bid placed at market time t belongs to
  the first round whose clearing time is after t. ``repeat = 0``: a single round; later bids are
  refused. A clearing that runs late (the broker was down) still clears the round's period;
  reservations whose start has passed start at once (Slurm) or are launched at once (local).
* **Escrow.** Placing a bid moves its maximum price from the user's account to
  ``escrow:dayahead`` (refused with 402 if the balance does not cover it): a sealed bid must be
  payable, and the money cannot be spent twice on the spot market meanwhile. At clearing a winner
  pays its Clarke price (escrow -> ``provider:revenue``) and gets the rest back; a loser gets
  everything back and pays nothing. Amounts are micro-units, like the spot market's.
* **Prices.** DPGVA's Clarke prices lie in ``[0, v_i]`` for winners and are 0 for losers
  (theorem; the library's payments are charged unchanged, to a micro-unit). The relaxed
  auction's heuristic allocation can give "odd" payments (negative, above the value, non-zero
  for a loser; ``docs/mutz_auctions.md``): the service charges ``clip(mu_i, 0, v_i)`` to winners
  and 0 to losers (individual rationality kept by the service), and records the library's value
  and the clip in the bid's note.
* **Reservations.**
  - *Slurm executor*: one Slurm reservation per winner, ``ReservationName=ms-MARKET-daBID``,
    from ``period_start + start`` for the allocated slots (length rounded up to the
    granularity), ``Users=root``, ``Flags=IGNORE_JOBS,OVERLAP``; DPGVA reserves the whole partition
    (``Nodes=ALL``: every job of the thesis's auction uses the whole machine), the relaxed
    auction ``CoreCnt=n`` (on a one-host cluster a "node" of the relaxed auction is a CPU;
    ``capacity`` is the number of CPUs sold). A winner's command is submitted at clearing with
    ``sbatch --reservation=NAME --begin=START -t LENGTH``, so Slurm starts it when its
    reservation begins and stops it at the end of the time it bought.
    Why ``OVERLAP``: Slurm's time limits are whole minutes and its scheduler starts a job at the
    first pass after the reservation begins, often a second or more late; a job with the slot's
    time limit then "ends" after the next winner's reservation begins, and Slurm would refuse to
    start it at all (``ReqNodeNotAvail, Reserved for maintenance``) if its own reservation did
    not let it look past other reservations, which ``OVERLAP`` does (measured on Slurm 22.05).
    The end of the slot is the market's to keep: the service cancels a winner's job still
    running when its reservation ends (``killed``, "reservation ended"), as on the local
    executor; Slurm's own time limit (and ``ResvOverRun=0``) is the backstop. The stop is
    recorded (the bid's note) before the ``scancel``, which follows the commit: a broker
    restarted in between reads the cancel as the market's stop, and cancels a job still running.
  - *Local executor*: the service holds its own slots (``capacity``; separate from the spot
    market's ``--slots``, so the two markets never compete for a slot), starts a winner's command
    at its reservation's start (its own process group, ``DATA/dayahead/job-BID``) and kills it at
    the end of the reservation (recorded first, killed after the commit). A restarted broker
    counts a job whose go was sent as started (never launched twice) and completes a job found
    ended with the exit status its wrapper wrote.
  - On a Slurm node shared with the spot market, Slurm itself keeps spot jobs (no time limit) off
    reserved resources once a reservation exists; a site gives the day-ahead market its own
    partition or nodes (``partition``).
* **Persistence.** Bids, rounds and reservations live in the market's database (tables
  ``da_bids`` and ``da_rounds``), so a restarted broker clears the rounds it missed and keeps the
  reservations it made. A clearing is one transaction, with the Slurm reservations and jobs made
  inside it: a broker killed after Slurm made them and before the commit clears the round again
  (the same sealed bids clear the same way), keeps a reservation of the bid's name that Slurm
  already holds and cancels that clearing's job (by its name, never recorded) before it submits
  the one it records.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from marketsched.mechanisms.clearing.dpgva import DPGVA
from marketsched.mechanisms.clearing.relaxed_dpgva import RelaxedDPGVA
from marketsched.platform.ledger import MICRO, REVENUE, user_account
from marketsched.platform.query import select
from marketsched.platform.rounds import start_rounds
from marketsched.platform.validation import MarketError, amount, number, show, utf8

ESCROW = "escrow:dayahead"
ENDED = "reservation ended"  # a bid's note once the market stops its job at its slot's end
MECHANISMS = ("dpgva", "relaxed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS da_rounds (
    round INTEGER PRIMARY KEY,
    clear_at REAL NOT NULL,
    period_start REAL NOT NULL,
    cleared_t REAL,
    welfare REAL,
    mechanism TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS da_bids (
    id {pk},
    round INTEGER NOT NULL,
    owner TEXT NOT NULL REFERENCES users(name),
    length REAL NOT NULL,
    deadline REAL NOT NULL,
    value REAL NOT NULL,
    nodes INTEGER NOT NULL,
    command TEXT,
    placed_t REAL NOT NULL,
    state TEXT NOT NULL,
    start_t REAL,
    end_t REAL,
    price BIGINT NOT NULL,
    library_price REAL,
    reservation TEXT,
    job_ref TEXT,
    job_state TEXT,
    exit_code INTEGER,
    note TEXT NOT NULL
)
"""
BID_COLUMNS = ("id", "round", "owner", "length", "deadline", "value", "nodes", "command", "placed_t", "state",
               "start_t", "end_t", "price", "library_price", "reservation", "job_ref", "job_state", "exit_code",
               "note")


@dataclass
class DayAheadConfig:
    """When rounds clear and what they sell (times are market seconds, see the module docstring)."""

    clear_at: float
    period_start: float
    horizon: float = 86400.0
    granularity: float = 900.0
    repeat: float = 86400.0
    mechanism: str = "dpgva"
    capacity: int = 1  # relaxed: nodes (CPUs) sold; local executor: held slots
    depth: int = 1000  # relaxed search depth
    seed: int = 0  # relaxed: round r uses numpy.random.default_rng([seed, r])

    def check(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown day-ahead mechanism {self.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
        for name in ("clear_at", "period_start", "horizon", "granularity", "repeat"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"day-ahead {name} must be a finite number of seconds, got {v!r}")
        if self.period_start < self.clear_at:
            raise ValueError("the reserved period must start at or after its clearing time "
                             f"(period_start {self.period_start} < clear_at {self.clear_at})")
        if not (self.granularity > 0 and self.horizon >= self.granularity):
            raise ValueError(f"need granularity > 0 and horizon >= granularity, got {self.granularity}, {self.horizon}")
        if self.repeat < 0 or (0 < self.repeat < self.horizon):
            raise ValueError(f"repeat must be 0 (one round) or at least the horizon, got {self.repeat}")
        if int(self.capacity) != self.capacity or self.capacity < 1:
            raise ValueError(f"capacity must be a whole number >= 1, got {self.capacity!r}")
        if int(self.depth) != self.depth or self.depth < 1:
            raise ValueError(f"depth must be a whole number >= 1, got {self.depth!r}")


class DayAhead:
    """The day-ahead auction attached to a :class:`~marketsched.live.broker.Broker` (it shares
    the broker's database, ledger, users, lock and executor kind)."""

    def __init__(self, broker, config: DayAheadConfig):
        config.check()
        self.broker = broker
        self.config = config
        self.store = broker.store
        pk = "BIGSERIAL PRIMARY KEY" if self.store.kind == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
        schema = _SCHEMA.format(pk=pk)
        if self.store.kind == "postgresql":
            schema = schema.replace(" REAL", " DOUBLE PRECISION")
        with broker.lock, self.store.transaction():
            for stmt in schema.split(";"):
                if stmt.strip():
                    self.store._exec(stmt)
            self.store._ensure_account(ESCROW)
        self.slurm = getattr(broker.executor, "arrange", None) is not None
        if self.slurm and config.granularity % 60:
            # a winner's job gets the time limit of its reservation, and Slurm's time limits are
            # whole minutes: a shorter or fractional slot could never hold the job
            raise ValueError(f"on Slurm the day-ahead granularity must be a whole number of minutes "
                             f"(Slurm time limits are minutes), got {config.granularity:g} s")
        self.root = broker.data / "dayahead"
        if not self.slurm:
            from marketsched.platform.executor import LocalExecutor

            # the spot market's launcher and cgroups (its own cgroup folder, named after
            # DATA/dayahead: keys are bid ids)
            self.local = LocalExecutor(self.root, limits=broker.config.limits())
            # a restarted broker re-attaches reservations' jobs that still run and kills the rest;
            # a job whose go was sent (the executor's state file says so) is started, even if its
            # start was not recorded yet: never launched twice (an ended one is judged by tick)
            started = [x for x in self.bids() if x["job_state"] == "running"
                       or (x["job_state"] == "scheduled" and self.local.went(x["id"]))]
            kept = [x["id"] for x in started if self.local.adopt(x["id"]) is not None]
            with broker.lock, self.store.transaction():
                for x in started:
                    if x["job_state"] == "scheduled":
                        self._set_job(x, "running")
            self.local.reap(kept)
        else:
            from marketsched.platform import jobfiles

            self.root_fd = jobfiles.open_root(self.root)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.last_error: str | None = None
        self._kicked: dict[int, float] = {}  # Slurm jobs whose reservation began (see _watch_slurm)
        self._ended: set[int] = set()  # Slurm jobs the service cancelled at the end of their slot
        self._cancels: list[int] = []  # jobs to stop once this tick's records are committed
        self.clearings: list[dict] = []  # what each clearing computed (library outcome), for audits

    # ------------------------------------------------------------------ rounds
    def round_times(self, r: int) -> tuple[float, float]:
        c = self.config
        return c.clear_at + r * c.repeat, c.period_start + r * c.repeat

    def open_round(self, t: float) -> int | None:
        """The round a bid placed at ``t`` joins (None: the market has closed)."""
        c = self.config
        if t < c.clear_at:
            r = 0
        elif c.repeat == 0:
            return None
        else:
            r = int(math.floor((t - c.clear_at) / c.repeat)) + 1
        return r

    # ------------------------------------------------------------------ placebid
    def place_bid(self, user: str, length, deadline, value, nodes=None, command=None) -> dict:
        """A sealed bid (thesis ``placebid``): its maximum price goes to escrow until clearing."""

        c = self.config
        length = number(length, "length")
        deadline = number(deadline, "deadline")
        value = number(value, "maximum price")
        if not length > 0:
            raise MarketError(f"length must be a positive number of seconds, got {length!r}")
        if deadline < length:
            raise MarketError(f"deadline ({deadline:g} s from the period's start) is before the length "
                              f"({length:g} s) could end")
        if deadline > c.horizon:
            raise MarketError(f"deadline {deadline:g} s is after the end of the reserved period ({c.horizon:g} s)")
        if math.ceil(length / c.granularity - 1e-9) > math.floor(deadline / c.granularity + 1e-9):
            raise MarketError(f"length {length:g} s rounded up to the granularity ({c.granularity:g} s) does not fit "
                              f"before the deadline {deadline:g} s rounded down")
        micros = amount(value, "maximum price")
        if nodes is None:
            nodes = 1 if c.mechanism == "relaxed" else c.capacity
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise MarketError(f"nodes must be a whole number >= 1, got {show(nodes)}")
        if c.mechanism == "dpgva" and nodes != c.capacity:
            raise MarketError(f"the DPGVA auction sells the whole machine ({c.capacity} node(s)); "
                              f"use the relaxed auction for nodes {show(nodes)}")
        if nodes > c.capacity:
            raise MarketError(f"nodes {show(nodes)} is more than the {c.capacity} the auction sells")
        b = self.broker
        if command is not None:
            if not isinstance(command, str) or not command.strip() or "\x00" in command:
                raise MarketError("command must be a non-empty shell command line")
            size = len(utf8(command, "command"))
            if size > b.config.max_command_bytes:
                raise MarketError(f"command is {size} bytes long, more than the {b.config.max_command_bytes} this "
                                  "market accepts", 413)
        with b.lock:
            if user not in b.balance:
                raise MarketError(f"unknown user {user!r}", 404)
            sealed = self.store._rows("SELECT COUNT(*) FROM da_bids WHERE owner = ? AND state = 'sealed'", (user,))[0][0]
            if sealed >= b.config.max_jobs_per_user:
                raise MarketError(f"{user} has {sealed} sealed day-ahead bids, the most this market allows one user "
                                  f"({b.config.max_jobs_per_user})", 429)
            t = b._now()
            r = self.open_round(t)
            if r is None:
                raise MarketError("the day-ahead market has closed (single round, already cleared)", 409)
            have = b.balance[user] - b._unposted(user)
            if have < micros:
                raise MarketError(f"balance too low: {have / MICRO:.6f} available, a sealed bid escrows its maximum "
                                  f"price {value:g}", 402)
            with self.store.transaction():
                self._ensure_round(r)
                cur = self.store._exec(
                    "INSERT INTO da_bids (round, owner, length, deadline, value, nodes, command, placed_t, state, "
                    "price, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'sealed', 0, '') RETURNING id",
                    (r, user, length, deadline, value, nodes, command, t))
                bid_id = int(cur.fetchone()[0])
                self.store.post(t, "escrow", user_account(user), ESCROW, micros, memo=f"day-ahead bid {bid_id}")
                b.balance[user] -= micros
            placed = self.bid(bid_id)
            assert placed is not None, "the bid was just inserted"
            return placed

    def _ensure_round(self, r: int) -> None:
        if not self.store._rows("SELECT 1 FROM da_rounds WHERE round = ?", (r,)):
            ca, ps = self.round_times(r)
            self.store._exec("INSERT INTO da_rounds (round, clear_at, period_start, mechanism) VALUES (?, ?, ?, ?)",
                             (r, ca, ps, self.config.mechanism))

    # ------------------------------------------------------------------ views (showres)
    # Views read under the broker's lock: a clearing updates a round's bids one by one inside one
    # transaction on the shared connection, holding the lock, so a view never shows half a round.
    def bid(self, bid_id: int) -> dict | None:
        with self.broker.lock:  # never half a clearing: it runs under the lock, in one transaction
            rows = self.store._rows(f"SELECT {', '.join(BID_COLUMNS)} FROM da_bids WHERE id = ?", (bid_id,))
        return self._view(dict(zip(BID_COLUMNS, rows[0]))) if rows else None

    def bids(self, user: str | None = None, round_: int | None = None) -> list[dict]:
        sql, params = select("da_bids", BID_COLUMNS, [("owner = ?", user), ("round = ?", round_)])
        with self.broker.lock:  # the connection is shared: read between transactions, not inside one
            rows = self.store._rows(sql, params)
        return [self._view(dict(zip(BID_COLUMNS, r))) for r in rows]

    def _view(self, row: dict) -> dict:
        row["price"] = row["price"] / MICRO
        if row["start_t"] is not None:
            row["start_time"] = _iso(self.broker.epoch + row["start_t"])
            row["end_time"] = _iso(self.broker.epoch + row["end_t"])
        return row

    def showres(self, user: str, admin: bool) -> dict:
        """Reservations and bids (own; the administrator: all) and the next clearing."""
        b = self.broker
        with b.lock:
            t = b._now()
            r = self.open_round(t)
            nxt = None
            if r is not None:
                ca, ps = self.round_times(r)
                nxt = {"round": r, "clear_at": ca, "clear_time": _iso(b.epoch + ca), "period_start": ps,
                       "period_start_time": _iso(b.epoch + ps), "horizon": self.config.horizon}
            rounds = [dict(zip(("round", "clear_at", "period_start", "cleared_t", "welfare", "mechanism"), x))
                      for x in self.store._rows("SELECT round, clear_at, period_start, cleared_t, welfare, mechanism "
                                                "FROM da_rounds ORDER BY round")]
            return {"t": t, "mechanism": self.config.mechanism, "granularity": self.config.granularity,
                    "capacity": self.config.capacity, "next": nxt, "rounds": rounds,
                    "bids": self.bids(None if admin else user)}

    # ------------------------------------------------------------------ clearing
    def due(self, t: float) -> list[int]:
        """Rounds whose clearing time has come and that are not cleared (with sealed bids or not)."""
        rows = self.store._rows("SELECT round FROM da_rounds WHERE cleared_t IS NULL AND clear_at <= ? ORDER BY round",
                                (t,))
        return [r for (r,) in rows]

    def clear(self, r: int) -> dict:
        """Clear round ``r`` now: the library's auction, Clarke prices in the ledger, reservations."""
        b = self.broker
        c = self.config
        with b.lock:
            t = b._now()
            _, period_start = self.round_times(r)
            bids = [x for x in self.bids(round_=r) if x["state"] == "sealed"]
            with self.store.transaction():
                if not bids:
                    self.store._exec("UPDATE da_rounds SET cleared_t = ?, welfare = 0 WHERE round = ?", (t, r))
                    return {"round": r, "bids": 0}
                length = np.array([x["length"] for x in bids], dtype=float)
                deadline = np.array([x["deadline"] for x in bids], dtype=float)
                value = np.array([x["value"] for x in bids], dtype=float)
                nodes = np.array([x["nodes"] for x in bids], dtype=np.int64)
                if c.mechanism == "dpgva":
                    out = DPGVA(c.granularity, c.horizon).clear(length, deadline, value)
                else:
                    out = RelaxedDPGVA(c.capacity, c.depth, c.granularity, c.horizon).clear(
                        length, deadline, value, nodes, rng=np.random.default_rng([c.seed, r]))
                self.clearings.append({"round": r, "bids": [x["id"] for x in bids], "start": out.start.copy(),
                                       "payments": out.payments.copy(), "welfare": out.welfare})
                g = c.granularity
                for x, s, mu in zip(bids, out.start, out.payments):
                    owner, escrow = x["owner"], int(round(x["value"] * MICRO))
                    note = ""
                    if s >= 0:
                        pay = min(max(float(mu), 0.0), x["value"])
                        if pay != mu:
                            note = f"library payment {mu:.6f} clipped to [0, value]"
                        price = int(round(pay * MICRO))
                        start_t = period_start + float(s)
                        end_t = start_t + math.ceil(x["length"] / g - 1e-9) * g
                        if price:
                            self.store.post(t, "dayahead", ESCROW, REVENUE, price, memo=f"day-ahead bid {x['id']}")
                        if escrow - price:
                            self.store.post(t, "refund", ESCROW, user_account(owner), escrow - price,
                                            memo=f"day-ahead bid {x['id']} (value - price)")
                        b.balance[owner] += escrow - price
                        res, job_ref = self._reserve(x, start_t, end_t)
                        self.store._exec(
                            "UPDATE da_bids SET state = 'won', start_t = ?, end_t = ?, price = ?, library_price = ?, "
                            "reservation = ?, job_ref = ?, job_state = ?, note = ? WHERE id = ?",
                            (start_t, end_t, price, float(mu), res, job_ref,
                             "scheduled" if x["command"] else None, note, x["id"]))
                    else:
                        if mu != 0:
                            note = f"library payment {mu:.6f} for a loser not charged"
                        self.store.post(t, "refund", ESCROW, user_account(owner), escrow,
                                        memo=f"day-ahead bid {x['id']} lost")
                        b.balance[owner] += escrow
                        self.store._exec("UPDATE da_bids SET state = 'lost', library_price = ?, note = ? WHERE id = ?",
                                         (float(mu), note, x["id"]))
                self.store._exec("UPDATE da_rounds SET cleared_t = ?, welfare = ? WHERE round = ?",
                                 (t, float(out.welfare), r))
            return {"round": r, "bids": len(bids), "won": int((out.start >= 0).sum()), "welfare": out.welfare}

    # ------------------------------------------------------------------ reservations
    def res_name(self, bid_id: int) -> str:
        ex = self.broker.executor
        mid = getattr(ex, "market_id", "local")
        return f"ms-{mid}-da{bid_id}"

    def _reserve(self, x: dict, start_t: float, end_t: float) -> tuple[str, str | None]:
        name = self.res_name(x["id"])
        if not self.slurm:
            return f"local:{name}", None
        from marketsched.platform.slurm import run

        ex = self.broker.executor
        now = self.broker._t
        start_wall = self.broker.epoch + max(start_t, now + 1)
        end_wall = self.broker.epoch + end_t
        where = ["Nodes=ALL"] if self.config.mechanism == "dpgva" else [f"CoreCnt={x['nodes']}"]
        if ex.partition:
            where.append(f"PartitionName={ex.partition}")
        user = self.broker._run_as(x["owner"]) if x["command"] else None
        # the reservation admits the account the job runs as (its owner's; single-user: ours)
        import pwd

        runner = user.name if user is not None else pwd.getpwuid(os.geteuid()).pw_name
        users = ",".join(sorted({"root", runner}))
        from marketsched.platform.slurm import SlurmError

        again = False
        try:
            run(["scontrol", "create", "reservation", f"ReservationName={name}", f"StartTime={_iso(start_wall)}",
                 f"EndTime={_iso(end_wall)}", f"Users={users}", "Flags=IGNORE_JOBS,OVERLAP"] + where)
        except SlurmError as exc:
            if "Duplicate reservation name" not in str(exc):
                raise
            # made by a clearing of this round that died before its commit (nothing of it was
            # recorded): the same sealed bids clear the same way, so it is this bid's, kept
            again = True
        job_ref = None
        if x["command"] and again:
            run(["scancel", "-n", name])  # that clearing's job, if submitted: never recorded, replaced
        if x["command"]:
            from marketsched.platform import jobfiles
            from marketsched.platform.slurm import BATCH, EXPORT, run_as_options, shell_quote, submit_environment

            wd = self.root / f"job-{x['id']}"
            uid, gid = (user.uid, user.gid) if user is not None else (None, None)
            dfd = jobfiles.open_jobdir(self.root_fd, wd.name, create=True, uid=uid, gid=gid)
            try:
                jobfiles.replace_file(dfd, "command.sh", (x["command"] + "\n").encode(), uid, gid)
            finally:
                os.close(dfd)
            secs = max(60, int(round(end_wall - start_wall)) // 60 * 60)  # whole minutes (granularity check)
            args = ["sbatch", "--parsable", "-J", name, f"--reservation={name}", f"--begin={_iso(start_wall)}",
                    f"--time={secs // 60}:{secs % 60:02d}", "-D", str(wd), "-o", str(wd / "stdout"),
                    "-e", str(wd / "stderr"), "--no-requeue",
                    EXPORT,
                    "-n", str(x["nodes"] if self.config.mechanism == "relaxed" else 1)] + run_as_options(user)
            if ex.partition:
                args += ["-p", ex.partition]
            script = BATCH.format(key=f"day-ahead bid {x['id']}", workdir=shell_quote(str(wd)))
            env = submit_environment(user, {"MARKETSCHED_DAYAHEAD_BID": x["id"]})
            job_ref = "slurm:" + run(args, input=script, env=env).strip().split(";")[0]
        return name, job_ref

    def cancel_reservations(self) -> None:
        """Delete this market's Slurm reservations and cancel their jobs (tests, shutdown with kill)."""
        if not self.slurm:
            for key in list(self.local.procs):
                self.local.kill(key)
            return
        from marketsched.platform.slurm import SlurmError, run

        for x in self.bids():
            if x["job_ref"] and x["job_ref"].startswith("slurm:"):
                try:
                    run(["scancel", x["job_ref"][6:]])
                except SlurmError:
                    pass
            if x["reservation"]:
                try:
                    run(["scontrol", "delete", f"reservation={x['reservation']}"])
                except SlurmError:
                    pass

    # ------------------------------------------------------------------ the service's thread
    def tick(self) -> None:
        """Clear due rounds; start, stop and watch reservations' jobs."""
        b = self.broker
        with b.lock:
            t = b._now()
            due = self.due(t)
        for r in due:
            self.clear(r)
        with b.lock:
            t = b._now()
            self._cancels = []
            ended = {} if self.slurm else dict(self.local.exits())  # one scan for every job
            with self.store.transaction():
                for x in self.bids():
                    if x["state"] != "won" or not x["command"] or x["job_state"] in ("completed", "failed", "killed"):
                        continue
                    if self.slurm:
                        self._watch_slurm(x)
                    else:
                        self._drive_local(x, t, ended)
            self._cancel_ended()

    def _set_job(self, x: dict, state: str, code=None, note=None) -> None:
        if note is None:
            self.store._exec("UPDATE da_bids SET job_state = ?, exit_code = ? WHERE id = ?", (state, code, x["id"]))
        else:
            self.store._exec("UPDATE da_bids SET job_state = ?, exit_code = ?, note = ? WHERE id = ?",
                             (state, code, note, x["id"]))

    def _drive_local(self, x: dict, t: float, ended: dict) -> None:
        """Start, watch and stop a reservation's job on the local executor (``ended``: the
        jobs the executor found ended in this tick's scan). The stop at the slot's end is
        recorded first, and the kill follows the commit (:meth:`_cancel_ended`); a job found gone
        without an exit reported here (the service restarted) is judged by the exit status its
        wrapper wrote."""
        key = x["id"]
        if x["job_state"] == "scheduled" and t >= x["start_t"] and t < x["end_t"]:
            try:  # as the bid owner's Unix account, like a spot-market job
                self.local.launch(key, x["command"], env={"MARKETSCHED_DAYAHEAD_BID": str(key)},
                                  user=self.broker._run_as(x["owner"]), record_go=True)
            except (OSError, MarketError) as exc:
                self._set_job(x, "failed", note=_noted(x, f"launch failed: {exc}"))
                return
            self._set_job(x, "running")
            return
        if x["job_state"] == "scheduled" and t >= x["end_t"]:
            self._set_job(x, "failed", note=_noted(x, "reservation passed unused"))
            return
        if x["job_state"] == "running":
            if key in ended:
                self._set_job(x, "completed", ended[key])
                self.local.forget(key)
            elif key not in self.local.procs:  # it ended while no service watched it (a restart)
                code = self.local.exit_code(key)
                if code is not None:
                    self._set_job(x, "completed", code)
                else:
                    self._set_job(x, "failed", note="process lost (broker restart)")
                self.local.forget(key)
            elif t >= x["end_t"]:
                self._set_job(x, "killed", note=_noted(x, ENDED))
                self._cancels.append(key)

    def _watch_slurm(self, x: dict) -> None:
        from marketsched.platform.slurm import SlurmExecutor, read_exit_code, run

        sid = int(x["job_ref"][6:])
        info = SlurmExecutor.show(self.broker.executor, sid)
        st = info.get("JobState") if info else None
        now = time.monotonic()
        if st != "PENDING":
            self._kicked.pop(sid, None)
        elif self.broker._t >= x["start_t"] and now >= self._kicked.get(sid, 0.0) + 1.0:
            # Slurm's scheduler passes run on events and every sched_interval (60 s by default):
            # nothing happens when a reservation begins, so the job would wait for the next pass.
            # An update of the job is an event: Slurm tries to start it at once (in its
            # reservation). Repeated every second while it pends (the reservation may become
            # active in Slurm a moment after our clock says it began).
            run(["scontrol", "update", f"jobid={sid}", "StartTime=now"])
            self._kicked[sid] = now
        ending = ENDED in (x["note"] or "").split("; ")  # the market's stop at the slot's end, recorded
        if st == "RUNNING" and self.broker._t >= x["end_t"] and sid not in self._ended:
            # the slot is over (the job may have started late, its Slurm time limit is whole
            # minutes): the market ends it, as the local executor does. The job's final state
            # is read on later ticks: a job that ended by itself meanwhile stays completed
            # (scancel of a finished job succeeds silently), and one that outlives the
            # signal is watched until Slurm has ended it. The stop is recorded first (the
            # bid's note) and the scancel follows the commit (:meth:`_cancel_ended`), so a
            # service killed in between judges the cancel at its restart as the market's own.
            if not ending:
                x = {**x, "note": _noted(x, ENDED)}
                self._set_job(x, x["job_state"], x["exit_code"], note=x["note"])
                ending = True
            self._cancels.append(sid)
        if st in ("RUNNING", "COMPLETING"):
            if x["job_state"] != "running":
                self._set_job(x, "running")
        elif st == "COMPLETED" or st == "FAILED":
            self._set_job(x, "completed", read_exit_code(self.root / f"job-{x['id']}"))
        elif st in ("TIMEOUT", "CANCELLED", "DEADLINE"):
            note = x["note"] if ending else _noted(x, f"slurm: {st}")
            self._set_job(x, "killed", read_exit_code(self.root / f"job-{x['id']}"), note=note)
        elif st not in ("PENDING", None):
            self._set_job(x, "failed", note=f"slurm: {st}")

    def _cancel_ended(self) -> None:
        """Stop the jobs whose slots are over, once their stop is committed: kill a local job
        (:meth:`_drive_local`; one a crash left running is killed by the restarted service, its
        bid ended); cancel a Slurm job (:meth:`_watch_slurm`), once per service (a restarted one
        cancels again a job still running)."""
        if not self.slurm:
            for key in self._cancels:
                self.local.kill(key)
                self.local.forget(key)
            return
        from marketsched.platform.slurm import SlurmError, run

        for sid in self._cancels:
            try:
                run(["scancel", str(sid)])
            except SlurmError:
                pass
            self._ended.add(sid)

    def start(self, every: float = 0.2) -> DayAhead:
        self._thread = start_rounds(self, "dayahead", lambda: self._stop.wait(every), self.tick)
        return self

    def stop(self, cancel: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if cancel:
            self.cancel_reservations()
        if not self.slurm:  # reservations' jobs run on (re-attached at restart) unless cancelled
            self.local.shutdown(kill=cancel)


def _noted(x: dict, text: str) -> str:
    """A bid's note with ``text`` appended."""
    return (x["note"] + "; " if x["note"] else "") + text


def _iso(unix: float) -> str:
    """Slurm's time format (local time, whole seconds)."""
    return datetime.fromtimestamp(math.floor(unix)).strftime("%Y-%m-%dT%H:%M:%S")


def config_from_clock(now: float, clear_in: float, lead: float, **kw) -> DayAheadConfig:
    """A config whose first round clears ``clear_in`` s after market time ``now`` and reserves the
    period starting ``lead`` s after that clearing (demos, tests, short "days")."""
    return DayAheadConfig(clear_at=now + clear_in, period_start=now + clear_in + lead, **kw)


def daily_config(epoch: float, now: float, clear_hhmm: str, **kw) -> DayAheadConfig:
    """Rounds that clear every day at ``HH:MM`` local time for the next day (00:00 to 24:00), as
    the thesis's day-ahead server does."""
    try:
        hh, mm = (int(p) for p in clear_hhmm.split(":"))
        assert 0 <= hh < 24 and 0 <= mm < 60
    except (ValueError, AssertionError):
        raise ValueError(f"clearing time must be HH:MM, got {clear_hhmm!r}") from None
    wall = epoch + now
    d = datetime.fromtimestamp(wall)
    clear = d.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if clear.timestamp() <= wall:
        clear = datetime.fromtimestamp(clear.timestamp() + 86400)
    nxt = datetime.fromtimestamp(clear.timestamp() + 86400).replace(hour=0, minute=0, second=0, microsecond=0)
    if nxt.timestamp() < clear.timestamp():
        nxt = datetime.fromtimestamp(nxt.timestamp() + 86400)
    kw.setdefault("horizon", 86400.0)
    kw.setdefault("repeat", 86400.0)
    return DayAheadConfig(clear_at=clear.timestamp() - epoch, period_start=nxt.timestamp() - epoch, **kw)
