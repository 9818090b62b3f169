'''The scaffold of every live market's web page: one self-contained HTML document (no external
scripts, styles or fonts) with the look the pages share, the script helpers they share, and its
Content-Security-Policy.

A market's page is ``page(title, style, body, script)``: ``STYLE`` plus the page's own
``style``, its ``body`` markup, and its ``script`` after ``SCRIPT`` (the shared helpers below).
``csp(page)`` is the page's policy: only its own inline script and style (by hash), requests to
its own origin only. :func:`marketsched.platform.http.page_endpoint` serves it.

The helpers (JavaScript, in ``SCRIPT``): ``$(id)``; ``fmt(x, digits)`` (``-`` for none);
``esc(text)`` (HTML-escaped); ``pageKey(token)``, the non-extractable signing key a page keeps
instead of the token, and its key id (``SHA-256("marketsched-kid:" + SHA-256(token))[:32]``,
as :mod:`marketsched.platform.tokens`); ``signature(k, path)``, the ``Authorization`` header of a
signed read (``MarketSig``, see :mod:`marketsched.platform.http`); and ``serialized(read)``,
which makes a refresh function that runs ``read`` one at a time, so an older response never
renders after a newer one (a read can take longer than the refresh interval on a busy machine):
a call while a read is in flight makes one more read after it (``busy()`` tells whether one is,
for a timer that rather skips its tick). A token in the page's address is dropped unread.
'''

import base64
import hashlib
import re

# the look every page shares: header, cards, tables
STYLE = """\
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
  header { background: #1d2330; color: #fff; padding: 10px 18px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .big { font-size: 22px; font-weight: 600; }
  main { padding: 12px 18px; display: grid; grid-template-columns: minmax(380px, 1fr) minmax(380px, 1fr); gap: 14px; }
  section { background: #fff; border-radius: 6px; padding: 10px 14px; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
  section.wide { grid-column: 1 / -1; }
  h2 { font-size: 15px; margin: 2px 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 3px 6px; border-bottom: 1px solid #eceef2; font-variant-numeric: tabular-nums; }
  th { font-weight: 600; color: #566; white-space: nowrap; }
  .muted { color: #778; }
  #error { color: #a50e0e; }
"""

SCRIPT = r'''"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (x, d = 3) => (x === null || x === undefined) ? "-" : Number(x).toFixed(d);
function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c])); }
const enc = new TextEncoder();
const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
if (location.hash) history.replaceState(null, "", location.pathname);  // tokens in the address are not read
async function pageKey(tok) {  // {key, keyId}: the token itself is not kept
  const h = hex(await crypto.subtle.digest("SHA-256", enc.encode(tok)));
  const keyId = hex(await crypto.subtle.digest("SHA-256", enc.encode("marketsched-kid:" + h))).slice(0, 32);
  const key = await crypto.subtle.importKey("raw", enc.encode(h), {name: "HMAC", hash: "SHA-256"}, false, ["sign"]);
  return {key: key, keyId: keyId};
}
async function signature(k, path) {
  const t = Date.now();
  const sig = hex(await crypto.subtle.sign("HMAC", k.key, enc.encode("marketsched-page-v1\nGET\n" + path + "\n" + t)));
  return "MarketSig kid=" + k.keyId + ", t=" + t + ", sig=" + sig;
}
function serialized(read) {
  let pending = null, again = false;
  const call = () => {
    if (pending) { again = true; return pending; }
    pending = (async () => {
      try {
        do { again = false; await read(); } while (again);
      } finally { pending = null; }
    })();
    return pending;
  };
  call.busy = () => pending !== null;
  return call;
}
'''


def page(title: str, style: str, body: str, script: str) -> str:
    """The self-contained HTML document of a market's page (see the module docstring)."""
    return ('<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<style>\n{STYLE}{style}</style>\n</head>\n<body>\n{body}<script>\n{SCRIPT}{script}</script>\n"
            "</body>\n</html>\n")


def csp(page: str) -> str:
    """The Content-Security-Policy of a self-contained ``page``: its one inline script and style
    by hash, requests to its own origin only."""

    def sha256(pattern: str) -> str:
        m = re.search(pattern, page, re.S)
        if m is None:
            raise RuntimeError(f"the page has no {pattern!r}")
        return "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1).encode()).digest()).decode() + "'"

    return (f"default-src 'none'; script-src {sha256(r'<script>(.*?)</script>')}; "
            f"style-src {sha256(r'<style>(.*?)</style>')}; connect-src 'self'; img-src 'self'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")
