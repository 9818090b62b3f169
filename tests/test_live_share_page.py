"""The share market's page (``marketsched market share --serve PORT``): the state it serves (each
job's bid, CPUs, rule and delivered shares, payments), who may read it (the viewer token, the
page's signed reads, the market's own Unix account), and the page in a browser."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from live_helpers import wait_for
from marketsched.live.share import FixedBids, ShareMarket
from marketsched.live.share_page import ShareServer, ShareView
from marketsched.platform.tokens import hash_token, page_key_id, page_signature
from test_share_cpus import reference_allocation

POOL = sorted(os.sched_getaffinity(0))[:2]
pytestmark = pytest.mark.skipif(len(POOL) < 2, reason="needs two CPUs")
BIDS = [3.0, 2.0, 1.0]
HANG = 600.0  # a guard against a hang, not a timing claim


@pytest.fixture(scope="module")
def served():
    m = ShareMarket(POOL, "sh", FixedBids(BIDS), BIDS, interval=0.2)
    view = ShareView(m)
    srv = ShareServer(view, "127.0.0.1", 0)
    srv.serve_in_thread()
    try:
        m.start()
        assert wait_for(lambda: len(m.usage) >= 4, timeout=HANG), "no periods enforced"
        yield m, view, srv
    finally:
        srv.shutdown()
        m.stop()


def get(srv, path, headers=None, method="GET"):
    req = urllib.request.Request(srv.url + path, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_state_shows_each_jobs_bid_rule_delivered_shares_and_payments(served):
    m, view, srv = served
    status, s = get(srv, "/api/share", {"Authorization": f"Bearer {view.token}"})
    assert status == 200, s
    x = [float(v) for v in reference_allocation("sh", BIDS, 2)]
    assert s["rule"] == "sh" and s["cpus"] == POOL and s["rounds"] >= 4 and s["window"] >= 3
    assert [j["bid"] for j in s["jobs"]] == BIDS
    assert [j["cpus"] for j in s["jobs"]] == pytest.approx(x, rel=1e-12)
    assert [j["rule"] for j in s["jobs"]] == pytest.approx(np.array(x) / sum(x), rel=1e-9)
    assert [j["on"] for j in s["jobs"]] == [POOL[0], POOL[1], POOL[1]]
    delivered = [j["delivered"] for j in s["jobs"]]
    assert all(d is not None and 0 <= d <= 1 for d in delivered) and sum(delivered) == pytest.approx(1.0)
    for j in s["jobs"]:  # pay-as-bid every period so far; the quota caps what a job receives
        assert j["paid"] % j["bid"] == 0 and j["paid"] >= 4 * j["bid"]
        assert j["received"] <= j["cpus"] * 1.5 + 0.05  # a window of a few 0.2 s periods, quotas per 0.1 s


def signed(view_hash, path, t_ms=None, key_hash=None):
    t_ms = int(time.time() * 1000) if t_ms is None else t_ms
    kid = page_key_id(view_hash)
    sig = page_signature(key_hash or view_hash, "GET", path, t_ms)
    return {"Authorization": f"MarketSig kid={kid}, t={t_ms}, sig={sig}"}


def test_readers_without_the_token_are_refused_and_nothing_is_writable(served):
    m, view, srv = served
    h = hash_token(view.token)
    assert get(srv, "/api/share")[0] == 401
    assert get(srv, "/api/share", {"Authorization": "Bearer " + view.token + "x"})[0] == 401
    assert get(srv, "/api/share", {"Authorization": "Bearer " + h})[0] == 401  # the hash is not the token
    assert get(srv, "/api/share", signed(h, "/api/share"))[0] == 200  # the page's signed read
    assert get(srv, "/api/share", signed(h, "/api/share", key_hash=hash_token("guess")))[0] == 401
    assert get(srv, "/api/share", signed(h, "/api/share", t_ms=int((time.time() - 3600) * 1000)))[0] == 401  # replayed late
    assert get(srv, "/api/share", signed(h, "/api/other"))[0] == 401  # signed for another path
    for method in ("POST", "PUT", "DELETE"):
        assert get(srv, "/api/share", {"Authorization": f"Bearer {view.token}"}, method=method)[0] == 405
    assert get(srv, "/api/health")[0] == 200


def test_the_page_shows_the_jobs(served, browser):
    from selenium.webdriver.common.by import By

    from browser_helpers import fresh, wait
    from test_live_web import login

    m, view, srv = served
    browser.get(srv.url + "/")
    login(browser, view.token)

    def text(el_id):
        return fresh(lambda: browser.find_element(By.ID, el_id).text)

    assert wait(browser, lambda d: "Sanghavi-Hajek" in text("rule"))
    assert wait(browser, lambda d: text("jobs").splitlines()[0].split()[:4] == ["0", "-", "3.000", "1.0000"])
    rows = text("jobs").splitlines()
    assert [r.split()[-1] for r in rows] == [str(POOL[0]), str(POOL[1]), str(POOL[1])]
    assert [r.split()[4] for r in rows] == ["0.5400", "0.3200", "0.1400"]  # SH 31/54, 16/54, 7/54 of 2 CPUs: x / sum x
