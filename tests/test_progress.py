"""marketsched.progress: plain progress lines when the output is not a terminal."""

import io

from rich.console import Console

from marketsched.progress import Progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _plain(clock, **kw):
    out = io.StringIO()
    return Progress(console=Console(file=out, force_terminal=False), clock=clock, **kw), out


def test_one_line_per_tenth_and_at_the_end():
    clock = Clock()
    bar, out = _plain(clock)
    with bar:
        task = bar.add_task("cells", total=20)
        for _ in range(20):
            clock.t += 1.0
            bar.advance(task)
    lines = out.getvalue().splitlines()
    assert lines == [f"cells: {k}/20 ({5 * k}%) after {k} s" for k in range(2, 21, 2)]


def test_a_slow_task_reports_every_so_often_between_tenths():
    clock = Clock()
    bar, out = _plain(clock, every_seconds=30.0)
    with bar:
        task = bar.add_task("sim", total=1000)
        for done in range(1, 60):  # 1 job every 10 s: under a tenth in 590 s
            clock.t += 10.0
            bar.update(task, completed=done)
    lines = out.getvalue().splitlines()
    assert lines[0] == "sim: 3/1,000 (0%) after 30 s"
    assert len(lines) == 19 and lines[-1] == "sim: 57/1,000 (6%) after 570 s"


def test_no_line_without_progress_and_none_on_a_terminal():
    clock = Clock()
    bar, out = _plain(clock)
    with bar:
        task = bar.add_task("idle", total=10)
        clock.t += 100.0
        bar.update(task, completed=0)
    assert out.getvalue() == ""
    term = io.StringIO()
    live = Progress(console=Console(file=term, force_terminal=True), clock=clock)
    assert not live.plain
