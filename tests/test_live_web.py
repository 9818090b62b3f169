"""The market's web page in headless Chromium (Debian's chromium and chromium-driver, driven
with selenium): it loads, shows a submitted job and the price, and updates by itself after a
completion. A screenshot is saved (to $MARKETSCHED_ARTIFACTS if set, else the test's tmp
folder; its path is printed)."""

import os
import shutil
import time
from pathlib import Path

import pytest

from live_helpers import work
from marketsched.live.api import MarketServer
from marketsched.live.broker import Broker, MarketConfig

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def _need_browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install chromium and chromium-driver (.ci/run); missing {missing}")
        pytest.skip(f"headless browser test needs Debian's chromium and chromium-driver; missing {missing}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium is a test dependency: pip install -e '.[test]'")




@pytest.fixture
def browser(tmp_path):
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait(driver, pred, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred(driver):
                return True
        except Exception:  # noqa: BLE001 - element not there yet
            pass
        time.sleep(0.1)
    return False


def test_web_page_shows_jobs_price_and_updates(tmp_path, browser):
    from selenium.webdriver.common.by import By

    broker = Broker(tmp_path / "market", MarketConfig(slots=1)).start()
    admin_token = broker.ensure_admin()
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        broker.add_user(True, "alice", 100)
        broker.add_user(True, "bob", 100)
        low = broker.submit("alice", False, 2.0, work(30))["id"]
        time.sleep(0.3)
        high = broker.submit("bob", False, 5.0, work(2.0))["id"]
        browser.get(f"{srv.url}/#token={admin_token}")

        def text(el_id):
            return browser.find_element(By.ID, el_id).text

        assert wait(browser, lambda d: f"\n{high} bob 5.00" in "\n" + text("running"))
        assert f"{low} alice 2.00 preempted" in text("queue")
        assert text("price") == "2.000"  # k-th price: the best queued bid
        assert "HB / k-th price" in text("mech") and text("me") == "admin (admin)"
        balances = text("balances")
        assert "alice" in balances and "bob" in balances and "total deposits 200.000" in balances
        assert browser.find_element(By.ID, "price-line").get_attribute("d").startswith("M")
        out = Path(os.environ.get("MARKETSCHED_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(out / "live_market_preemption.png"))
        refreshes = int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes"))
        # bob's job completes: without a reload, the page shows it ended and alice's job running again
        assert wait(browser, lambda d: f"{high} bob completed 0" in text("recent"), 20)
        assert wait(browser, lambda d: f"\n{low} alice 2.00" in "\n" + text("running"))
        assert text("price") == "1.000"  # nothing queued: the reservation price
        assert int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes")) > refreshes
        assert "token" not in browser.current_url  # the token left the address bar
        shot = out / "live_market_page.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshots: {out / 'live_market_preemption.png'}, {shot}")
        # a wrong token: the page says so and asks for one
        browser.execute_script("localStorage.setItem('marketsched-token', 'wrong')")
        browser.refresh()
        assert wait(browser, lambda d: "wrong token" in text("error"))
        assert browser.find_element(By.ID, "login").is_displayed()
    finally:
        srv.shutdown()
        srv.server_close()
        broker.stop(kill_jobs=True)
