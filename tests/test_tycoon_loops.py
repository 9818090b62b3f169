"""Tycoon's threads (marketsched.live.tycoon) run on the shared keep-alive loop
(marketsched.platform.rounds): a stride quantum or a re-split that raises neither stops its
thread nor goes unsaid. No job is started: the threads run counted, scripted rounds, never timed."""

import os
import threading

from marketsched.live.tycoon import TycoonMarket


def test_a_raising_stride_quantum_or_resplit_is_kept_printed_and_its_thread_goes_on(capsys):
    m = TycoonMarket(hosts=[min(os.sched_getaffinity(0))], budgets=[1.0, 2.0], weights=[[1.0], [1.0]], interval=1e-4,
                     enforcement="stride", quantum=1e-4)
    quanta: list[int] = []
    splits: list[int] = []
    done = {"stride": threading.Event(), "agents": threading.Event()}

    def quantum(j: int) -> None:
        quanta.append(j)
        if len(quanta) == 2:
            raise RuntimeError("quantum two broke")
        if len(quanta) == 4:
            done["stride"].set()

    def resplit() -> None:
        splits.append(len(splits) + 1)
        if len(splits) == 1:
            raise ValueError("re-split one broke")
        if len(splits) == 3:
            done["agents"].set()

    m.stride_quantum = quantum  # type: ignore[method-assign]
    m.resplit = resplit  # type: ignore[method-assign]
    m._start_loops()
    assert sorted(t.name for t in m._threads) == ["tycoon-agents", "tycoon-stride-0"]
    try:
        assert done["stride"].wait(60) and done["agents"].wait(60)
    finally:
        m.stop()  # sets the stop event and joins the threads
    assert not any(t.is_alive() for t in m._threads)
    assert set(quanta) == {0} and len(quanta) >= 4 and len(splits) >= 3  # rounds after each failure ran
    err = capsys.readouterr().err
    assert err.count("RuntimeError: quantum two broke") == 1
    assert err.count("ValueError: re-split one broke") == 1
    assert m.last_error is not None and m.last_error.startswith("Traceback (most recent call last):")
    assert "quantum two broke" in m.last_error or "re-split one broke" in m.last_error
