"""marketsched.progress: plain progress lines when the output is not a terminal."""

import io
import subprocess
import sys

from marketsched.progress import BAR, ELAPSED, Progress, rate


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _plain(clock, **kw):
    out = io.StringIO()
    return Progress("{task.description}", BAR, clock=clock, stream=out, **kw), out


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
    assert bar.plain


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_rich_live_bar_and_a_pipe_never_imports_rich(monkeypatch):
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(var, raising=False)
    term = Terminal()
    live = Progress("{task.description}", BAR, ELAPSED, rate("jobs"), stream=term, clock=Clock(), transient=True)
    assert not live.plain
    with live:
        task = live.add_task("sim", total=10)
        live.update(task, completed=10)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")  # rich's own rule: this terminal takes no escape codes
    assert Progress(stream=Terminal()).plain
    monkeypatch.delenv("TTY_COMPATIBLE")
    monkeypatch.setenv("FORCE_COLOR", "1")  # and this pipe does
    assert not Progress(stream=io.StringIO()).plain
    monkeypatch.delenv("FORCE_COLOR")
    code = ("import io, sys; from marketsched.progress import Progress; p = Progress(stream=io.StringIO()); "
            "print(p.plain, any(m == 'rich' or m.startswith('rich.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"]


def test_a_rate_column_gives_each_task_its_rate_so_far_and_what_is_left():
    clock = Clock()
    out = io.StringIO()
    bar = Progress("{task.description}", BAR, rate("jobs"), clock=clock, stream=out, every_seconds=30.0)
    with bar:
        fast = bar.add_task("fcfs", total=1000)
        clock.t += 2.0
        bar.update(fast, completed=1000)
        slow = bar.add_task("ees", total=1000)
        for done in (1, 2, 3):
            clock.t += 40.0
            bar.update(slow, completed=done)
    assert out.getvalue().splitlines() == [
        "fcfs: 1,000/1,000 (100%) after 2 s, 500 jobs/s",
        "ees: 1/1,000 (0%) after 40 s, 0.025 jobs/s, about 39,960 s left",
        "ees: 2/1,000 (0%) after 80 s, 0.025 jobs/s, about 39,920 s left",
        "ees: 3/1,000 (0%) after 120 s, 0.025 jobs/s, about 39,880 s left"]


def test_a_heartbeat_names_a_stalled_task_every_so_often():
    clock = Clock()
    out = io.StringIO()
    bar = Progress("{task.description}", BAR, rate("jobs"), clock=clock, stream=out, every_seconds=30.0)
    task = bar.add_task("ees", total=1000)
    for _ in range(7):  # the thread of heartbeat=True calls tick(); here the test does, on its clock
        clock.t += 10.0
        bar.tick()
    bar.update(task, completed=1000)
    clock.t += 100.0
    bar.tick()  # finished: silent
    assert out.getvalue().splitlines() == ["ees: 0/1,000 (0%) after 30 s, 0 jobs/s",
                                           "ees: 0/1,000 (0%) after 60 s, 0 jobs/s",
                                           "ees: 1,000/1,000 (100%) after 70 s, 14.3 jobs/s"]


def test_the_heartbeat_thread_stops_with_the_context():
    bar = Progress("{task.description}", BAR, stream=io.StringIO(), heartbeat=True, every_seconds=0.01)
    with bar:
        assert bar._thread is not None and bar._thread.is_alive()
        thread = bar._thread
    assert not thread.is_alive() and bar._thread is None
