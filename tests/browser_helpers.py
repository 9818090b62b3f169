"""Waiting on a web page in the headless browser of the ``browser`` fixture (conftest.py)
without timing claims."""

import time


def wait(driver, pred, timeout=60.0):  # a guard against a hang, not a timing claim
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred(driver):
                return True
        except Exception:  # noqa: BLE001 - element not there yet
            pass
        time.sleep(0.1)
    return False


def fresh(read, tries: int = 100):
    """``read()`` again when the page replaced the element between finding and reading it (its
    refresh re-renders the tables): a read of the element as it is, not of a stale one."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(tries - 1):
        try:
            return read()
        except StaleElementReferenceException:
            time.sleep(0.01)
    return read()
