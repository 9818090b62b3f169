"""The command line's client of a live market's API (standard library only) and the options
every market's ``serve`` and client commands share.

A :class:`Client` talks to a server's **Unix socket** (the caller is its Unix account, no
token) or to its TCP address with a token, which it sends only to a server shown to be the
market's (``check_server``: :mod:`marketsched.platform.identity`); otherwise it refuses,
sending nothing.
"""

from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import click

from marketsched.platform.files import short_socket_path

DEFAULT_URL = "http://127.0.0.1:8765"  # the live market's default address (``market serve``)


class Client:
    """A minimal JSON client of the market's API (standard library; no dependency): over HTTP
    at ``url`` with ``token``, or over the broker's Unix socket at ``socket_path`` (no token).

    With ``check_server`` (the command line's clients), the token is sent over TCP only to a
    server shown to be the market's (:mod:`marketsched.platform.identity`): over ``https``, one
    presenting the certificate pinned in ``server_cert`` (default: ``server_dir``'s
    ``server-cert.pem``, if there), else one the system's certificate authorities vouch for,
    under the URL's host name; over plain ``http``, on this host only, the socket listening on
    the port must be the one ``server_dir``'s ``server.id`` names, checked before connecting
    and again before sending. Otherwise :class:`ClientError`, and nothing is sent."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0, socket_path=None,
                 *, check_server: bool = False, server_dir=None, server_cert=None):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self.check_server = check_server
        self.server_dir = Path(server_dir) if server_dir is not None else None
        self.server_cert = Path(server_cert) if server_cert is not None else None

    def request(self, method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.socket_path is not None:
            status, reason, raw = self._unix(self.socket_path, method, path, data, headers)
        else:
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            status, reason, raw = self._http(method, path, data, headers)
        if status >= 400:
            try:
                msg = json.loads(raw).get("error", reason)
            except (ValueError, AttributeError):
                msg = reason
            if status == 503 and "try again" not in str(msg):  # busy (the server's own 503 says so)
                msg = f"the server is busy, try again in a moment: {msg}"
            raise ClientError(msg, status)
        return json.loads(raw or b"null")

    def _connection(self, verify: bool) -> tuple[http.client.HTTPConnection, Callable[[], None] | None]:
        """A connection to ``url``, not yet open, and the check to make once it is (or None)."""
        from marketsched.platform.identity import (
            CERT_NAME,
            NotTheServer,
            check_listener,
            listeners,
            pinned_context,
            read_identity,
        )

        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClientError(f"the market's address must be http://HOST:PORT or https://HOST:PORT, got {self.url!r}", 0)
        port = u.port or (443 if u.scheme == "https" else 80)
        if u.scheme == "https":
            pin = self.server_cert
            if pin is None and self.server_dir is not None and (self.server_dir / CERT_NAME).exists():
                pin = self.server_dir / CERT_NAME
            if verify and pin is not None:
                try:
                    ctx, ders = pinned_context(pin)
                except NotTheServer as exc:
                    raise ClientError(f"{exc}; your token was not sent", 0) from None
                tls = http.client.HTTPSConnection(u.hostname, port, timeout=self.timeout, context=ctx)

                def pinned() -> None:
                    if tls.sock is None or tls.sock.getpeercert(binary_form=True) not in ders:
                        raise NotTheServer(f"the server at {self.url} does not present the certificate pinned in {pin}")
                return tls, pinned
            return http.client.HTTPSConnection(u.hostname, port, timeout=self.timeout), None
        conn = http.client.HTTPConnection(u.hostname, port, timeout=self.timeout)
        if not verify:
            return conn, None
        from marketsched.platform.server import is_loopback

        if not is_loopback(u.hostname):
            raise ClientError(f"refusing to send your token over plain HTTP to {self.url}, beyond this host: nothing "
                              "proves who answers there, and the token would cross the network in clear. Use https "
                              "(pin the server's certificate with --server-cert)", 0)
        if self.server_dir is None:
            raise ClientError(f"refusing to send your token over plain HTTP to {self.url} without checking who listens "
                              "there (a process that took the port while the server was down would get it): give the "
                              "server's data folder (--data), whose server.id names its socket, or use https with "
                              "--server-cert", 0)
        try:
            ident = read_identity(self.server_dir)
        except NotTheServer as exc:
            if not listeners(port):  # the server is down (a clean stop removes its identity)
                raise ConnectionRefusedError(f"nothing listens on port {port}") from None
            raise ClientError(f"{exc}; your token was not sent", 0) from None

        def listener() -> None:
            check_listener(ident, port, self.url)

        listener()  # before connecting (ConnectionRefusedError: nothing listens)
        return conn, listener  # and again once connected, before sending

    def _http(self, method, path, data, headers):
        from marketsched.platform.identity import NotTheServer

        verify = self.check_server and "Authorization" in headers
        prefix = urllib.parse.urlsplit(self.url).path
        try:
            conn, check = self._connection(verify)
            try:
                conn.connect()
                if check is not None:
                    check()
                conn.request(method, prefix + path, body=data, headers=headers)
                r = conn.getresponse()
                return r.status, r.reason, r.read()
            finally:
                conn.close()
        except NotTheServer as exc:
            raise ClientError(f"{exc}; your token was not sent", 0) from None
        except ssl.SSLCertVerificationError as exc:
            raise ClientError(f"the server at {self.url} is not shown to be the market: {exc.verify_message}; "
                              "your token was not sent", 0) from None
        except (OSError, http.client.HTTPException) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ClientError(f"cannot reach the market at {self.url}: {why} (is `marketsched market serve` running?)",
                              0) from None

    def _unix(self, socket_path: Path, method, path, data, headers):
        conn = _UnixConnection(socket_path, self.timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, r.reason, r.read()
        except OSError as exc:
            raise ClientError(f"cannot reach the market at {socket_path}: {exc.strerror or exc} "
                              "(is `marketsched market serve` running?)", 0) from None
        finally:
            conn.close()

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None):
        return self.request("POST", path, body if body is not None else {})


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            with short_socket_path(self.unix_path) as p:
                s.connect(p)
        except OSError:
            s.close()
            raise
        self.sock = s


class ClientError(click.ClickException):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def tls_options(f):
    """``--tls-cert``, ``--tls-key``, ``--insecure-http``: how a server's TCP address is served
    (the market's broker, the grid exchange's API)."""
    f = click.option("--insecure-http", is_flag=True,
                     help="Serve plain HTTP on an address that is not loopback (tokens cross the network in clear).")(f)
    f = click.option("--tls-key", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="The certificate's private key (PEM).")(f)
    return click.option("--tls-cert", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help="TLS certificate (PEM) for HTTPS; with --tls-key.")(f)


def server_check_options(f):
    """``--server-cert``: the certificate a client pins for an https server (the market's, the
    exchange's) before sending it a token."""
    return click.option("--server-cert", default=None, envvar="MARKETSCHED_SERVER_CERT",
                        type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help="The server's TLS certificate (PEM; a copy of DATA/server-cert.pem): over https, send the "
                             "token only to a server presenting exactly it [$MARKETSCHED_SERVER_CERT].")(f)


def party_limit_options(f):
    """``--max-party-requests``, ``--max-party-connections``: the server's limits per party (the
    market's broker, the grid exchange's API; :class:`marketsched.platform.server.Limits`, whose
    defaults apply when an option is left out). The command gets them as ``party_limits``, a
    dict of the given ones."""

    @functools.wraps(f)
    def command(*args, max_party_requests, max_party_connections, **kwargs):
        given = {"max_party_requests": max_party_requests, "max_party_connections": max_party_connections}
        return f(*args, party_limits={k: v for k, v in given.items() if v is not None}, **kwargs)

    command = click.option(
        "--max-party-connections", default=None, type=click.IntRange(1, 1_000_000),
        help="Connections one party may hold once its requests name it; one more takes the place of its own idle "
             "one, else HTTP 429 [default: 64].")(command)
    return click.option(
        "--max-party-requests", default=None, type=click.IntRange(1, 1_000_000),
        help="Requests one party may have in progress at once, reading their bodies included; more: HTTP 429 "
             "[default: 16].")(command)
