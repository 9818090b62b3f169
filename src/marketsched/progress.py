"""Progress display for the command line and the experiments.

On a terminal this is rich's live progress bar (on stderr). Piped into a file or a CI log a
live bar shows nothing until the end, so there :class:`Progress` prints plain lines on stderr
instead: one per task whenever it passes another tenth of its total, and at least every
``every_seconds`` while it advances, e.g. ``hb/kth: 2,500/5,000 (50%) after 3 s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import rich.progress
from rich.console import Console
from rich.progress import TaskID


class Progress(rich.progress.Progress):
    """:class:`rich.progress.Progress` that falls back to plain progress lines off a terminal.

    Takes rich's arguments (columns, ``transient``, ...); ``console`` defaults to stderr.
    ``every_seconds`` bounds the silence between two plain lines of an advancing task and
    ``clock`` (seconds, monotonic) is injectable for tests.
    """

    def __init__(self, *columns, console: Console | None = None, every_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        console = console or Console(stderr=True)
        self.plain = not console.is_terminal
        if self.plain:
            kwargs["disable"] = True  # no live display: the lines of _plain_line instead
        super().__init__(*columns, console=console, **kwargs)
        self.every_seconds = float(every_seconds)
        self._clock = clock
        # per task: (time it was added, tenths already reported, time of its last line, completed then)
        self._reported: dict[TaskID, tuple[float, int, float, float]] = {}

    def add_task(self, description: str, *args, **kwargs) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        now = self._clock()
        self._reported[task_id] = (now, 0, now, 0.0)
        return task_id

    def update(self, task_id: TaskID, *args, **kwargs) -> None:
        super().update(task_id, *args, **kwargs)
        self._plain_line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._plain_line(task_id)

    def _plain_line(self, task_id: TaskID) -> None:
        if not self.plain or task_id not in self._reported:
            return
        task = next(t for t in self.tasks if t.id == task_id)
        start, tenths, last_time, last_done = self._reported[task_id]
        done, total, now = task.completed, task.total, self._clock()
        new_tenths = int(10 * done / total) if total else 0
        if done == last_done or (new_tenths <= tenths and now - last_time < self.every_seconds):
            return
        self._reported[task_id] = (start, max(tenths, new_tenths), now, done)
        of = f"/{total:,.0f} ({100 * done / total:.0f}%)" if total else ""
        self.console.print(f"{task.description.strip()}: {done:,.0f}{of} after {now - start:.0f} s",
                           markup=False, highlight=False, soft_wrap=True)
