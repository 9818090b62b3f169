"""Process pools of the experiments: one explicit start method ("spawn"), so workers inherit no
threads or run-time state from the parent, and a pool started from a process with threads
raises no fork warning (Python 3.12+)."""

import threading
import warnings

from marketsched.experiments.processes import START_METHOD, process_pool

STATE = "as imported"


def _state(_):
    return STATE


def test_workers_start_fresh_from_a_threaded_parent():
    global STATE
    assert START_METHOD == "spawn"
    stop = threading.Event()
    th = threading.Thread(target=stop.wait, daemon=True)  # the parent has a second thread, as with the live market
    th.start()
    STATE = "changed at run time"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # 3.12+: forking a threaded process is a DeprecationWarning
            with process_pool(2) as pool:
                assert list(pool.map(_state, range(4))) == ["as imported"] * 4  # nothing inherited
    finally:
        STATE = "as imported"
        stop.set()
        th.join()
