"""Progress display for the command line and the experiments.

On a terminal this is rich's live progress bar (on stderr). Piped into a file or a CI log a
live bar shows nothing until the end, so there :class:`Progress` prints plain lines on stderr
instead, without importing rich (:mod:`marketsched.terminal`): one per task whenever it passes
another tenth of its total, and at least every ``every_seconds`` while it advances, e.g.
``hb/kth: 2,500/5,000 (50%) after 3 s``; with a :func:`rate` column, also the rate so far and
what it leaves to do, ``hb/kth: 2,500/5,000 (50%) after 3 s, 833 jobs/s, about 3 s left``, so
that a slow task shows as slow, not hung.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from marketsched.terminal import rich_console


@dataclass(frozen=True)
class Column:
    """A column of the live bar other than text: :data:`BAR`, :data:`COUNT` (done/total),
    :data:`ELAPSED`, :data:`REMAINING`, or :func:`rate`."""

    name: str
    unit: str = ""


BAR, COUNT, ELAPSED, REMAINING = Column("bar"), Column("count"), Column("elapsed"), Column("remaining")


def rate(unit: str) -> Column:
    """A column of the rate so far, ``unit`` per second of wall time since the task was added
    (e.g. ``rate("jobs")``: ``833 jobs/s``)."""
    return Column("rate", unit)


def _rate_text(done: float, seconds: float, unit: str) -> str:
    if seconds <= 0:
        return f"- {unit}/s"
    per = done / seconds
    return f"{per:,.0f} {unit}/s" if per >= 100 or per == 0 else f"{per:.3g} {unit}/s"


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float
    added: float
    tenths: int = 0  # tenths of the total already reported
    last_time: float = 0.0  # time of its last line, and what was completed then
    last_done: float = 0.0


class Progress:
    """A live progress bar on a terminal, plain progress lines elsewhere.

    ``columns``: what the live bar shows, left to right: text (a ``str``, a format of
    ``task``, e.g. ``"{task.description:<18}"``) or a :class:`Column`. ``transient``: the live
    bar disappears when done. ``stream``: where it goes (default stderr); ``every_seconds``
    bounds the silence between two plain lines of an advancing task and ``clock`` (seconds,
    monotonic) is injectable for tests. ``heartbeat``: plain lines also for a task that stalls,
    every ``every_seconds`` (:meth:`tick`, called from a thread while the context is open), so a
    task stuck at 0% is seen to be. Used as a context manager, like rich's.
    """

    def __init__(self, *columns: str | Column, stream=None, transient: bool = False, every_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, heartbeat: bool = False) -> None:
        self.stream = stream or sys.stderr
        self._heartbeat = heartbeat
        self._lock = threading.Lock()  # plain lines come from the caller and from the heartbeat thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        console = rich_console(self.stream, min_width=0)  # a live bar fits the terminal
        self.plain = console is None
        self.every_seconds = float(every_seconds)
        self._clock = clock
        self._tasks: dict[int, _Task] = {}
        self._rate = next((c for c in columns if isinstance(c, Column) and c.name == "rate"), None)
        self._live = None
        if console is not None:
            import rich.progress as rp

            class Rate(rp.ProgressColumn):
                def __init__(self, unit: str) -> None:
                    super().__init__()
                    self.unit = unit

                def render(self, task):  # rich's own elapsed time: the rate falls while a task stalls
                    from rich.text import Text

                    return Text(_rate_text(task.completed, task.elapsed or 0.0, self.unit), style="progress.data.speed")

            kinds = {"bar": rp.BarColumn, "count": rp.MofNCompleteColumn, "elapsed": rp.TimeElapsedColumn,
                     "remaining": rp.TimeRemainingColumn}
            self._live = rp.Progress(*[(Rate(c.unit) if c.name == "rate" else kinds[c.name]())
                                       if isinstance(c, Column) else rp.TextColumn(c)
                                       for c in columns], console=console, transient=transient)

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.start()
        elif self._heartbeat:
            self._thread = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.stop()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _beat(self) -> None:
        while not self._stop.wait(min(5.0, self.every_seconds)):
            self.tick()

    def tick(self) -> None:
        """Plain lines: a line for each unfinished task silent for ``every_seconds``, advanced or not."""
        if self._live is not None:
            return
        now = self._clock()
        for task in list(self._tasks.values()):
            if (task.total is None or task.completed < task.total) and now - task.last_time >= self.every_seconds:
                self._plain_line(task, force=True)

    def add_task(self, description: str, total: float | None = 100.0, completed: float = 0) -> int:
        """A new task; returns its id for :meth:`update` and :meth:`advance`."""
        now = self._clock()
        if self._live is not None:
            task_id = int(self._live.add_task(description, total=total, completed=int(completed)))
        else:
            task_id = len(self._tasks)
        self._tasks[task_id] = _Task(description, total, completed, now, last_time=now, last_done=completed)
        return task_id

    def update(self, task_id: int, *, completed: float | None = None, total: float | None = None,
               advance: float | None = None, description: str | None = None) -> None:
        """Set what is done (or ``advance`` it), the total or the description of a task."""
        task = self._tasks[task_id]
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if description is not None:
            task.description = description
        if self._live is not None:
            self._live.update(task_id, completed=task.completed, total=task.total,  # type: ignore[arg-type]
                              description=task.description)
        else:
            self._plain_line(task)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _plain_line(self, task: _Task, force: bool = False) -> None:
        with self._lock:
            self._plain_line_locked(task, force)

    def _plain_line_locked(self, task: _Task, force: bool) -> None:
        done, total, now = task.completed, task.total, self._clock()
        new_tenths = int(10 * done / total) if total else 0
        if not force and (done == task.last_done or (new_tenths <= task.tenths and now - task.last_time < self.every_seconds)):
            return
        task.tenths, task.last_time, task.last_done = max(task.tenths, new_tenths), now, done
        of = f"/{total:,.0f} ({100 * done / total:.0f}%)" if total else ""
        speed = ""
        if self._rate is not None:
            seconds = now - task.added
            speed = ", " + _rate_text(done, seconds, self._rate.unit)
            if total and done and seconds > 0 and done < total:
                speed += f", about {(total - done) * seconds / done:,.0f} s left"
        print(f"{task.description.strip()}: {done:,.0f}{of} after {now - task.added:.0f} s{speed}", file=self.stream,
              flush=True)
