"""The keep-alive loop of the market threads (marketsched.platform.rounds): a round that raises
is kept and printed once, the loop goes on, and stop ends it. Rounds are counted, never timed."""

import threading

from marketsched.platform.rounds import run_rounds, start_rounds


class Market:
    last_error: str | None = None


def scripted(stop_after: int):
    """A wait that says stop on its ``stop_after``-th call, and rounds whose second one fails."""
    calls = {"wait": 0, "round": 0}

    def wait() -> bool:
        calls["wait"] += 1
        return calls["wait"] > stop_after

    def round_() -> None:
        calls["round"] += 1
        if calls["round"] == 2:
            raise RuntimeError("round two broke")

    return calls, wait, round_


def test_a_failing_round_is_kept_and_printed_once_and_the_loop_goes_on(capsys):
    market = Market()
    calls, wait, round_ = scripted(stop_after=4)
    run_rounds(market, wait, round_)
    assert calls == {"wait": 5, "round": 4}  # rounds 3 and 4 ran after the failure; wait 5 stopped it
    assert market.last_error is not None
    assert market.last_error.startswith("Traceback (most recent call last):")
    assert "RuntimeError: round two broke" in market.last_error
    err = capsys.readouterr().err
    assert err.count("Traceback (most recent call last):") == 1
    assert err.count("RuntimeError: round two broke") == 1
    assert err.strip() == market.last_error.strip()


def test_no_round_runs_when_stopped_at_once_and_no_error_is_kept(capsys):
    market = Market()
    calls, wait, round_ = scripted(stop_after=0)
    run_rounds(market, wait, round_)
    assert calls == {"wait": 1, "round": 0}
    assert market.last_error is None
    assert capsys.readouterr().err == ""


def test_the_thread_goes_on_after_a_failure_until_stopped(capsys):
    """On its thread: the rounds after a failing one run, and setting the stop event ends it."""
    market, stop, third = Market(), threading.Event(), threading.Event()
    rounds = []

    def round_() -> None:
        rounds.append(len(rounds) + 1)
        if len(rounds) == 1:
            raise ValueError("first round broke")
        if len(rounds) == 3:
            third.set()
            stop.set()

    thread = start_rounds(market, "rounds-test", lambda: stop.wait(0), round_)
    assert thread.name == "rounds-test" and thread.daemon
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert third.is_set() and rounds == [1, 2, 3]
    assert market.last_error is not None and "ValueError: first round broke" in market.last_error
    assert capsys.readouterr().err.count("ValueError: first round broke") == 1
