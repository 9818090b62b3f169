"""Who answers on a port: the server's identity, so that a client sends its token only to the
market (or the exchange), never to a process that took the port while the server was down.

The server writes, in its data folder:

* ``server.id`` (mode 0644): its TCP listening socket's port, the socket's inode and the
  server's uid (JSON). On the same host, a client reads it and checks, in the kernel's table
  of TCP sockets (``/proc/net/tcp``, ``/proc/net/tcp6``), that every socket listening on that
  port is this one (same inode, same uid), before connecting and again once connected,
  before it sends anything. While the server's socket is open nobody else can listen on the
  port (no ``SO_REUSEPORT``), so a connection made between two checks that both see it
  reached it. An identity file the server's account does not own, or that another account
  could write (it or its folder writable by group or others), is not believed.
* ``server-cert.pem`` (0644), with TLS: the certificates of ``--tls-cert`` (never its key), for
  a client to pin: it accepts exactly that certificate, whoever signed it.

A client on another machine uses TLS: with the certificate pinned (a copy of
``server-cert.pem``), or checked by the system's certificate authorities and the host name.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import stat
from pathlib import Path

IDENTITY_NAME = "server.id"
CERT_NAME = "server-cert.pem"
_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)


class NotTheServer(Exception):
    """The process answering is not shown to be the server: the token is not sent."""


def _write_public(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o644)
        f.write(text)
    os.replace(tmp, path)


def write_identity(folder: Path, sock, tls_cert=None) -> dict:
    """Write ``folder/server.id`` for listening socket ``sock`` (and, with ``tls_cert``, the
    certificates of that PEM file to ``folder/server-cert.pem``); returns the identity."""
    ident = {"port": sock.getsockname()[1], "inode": os.fstat(sock.fileno()).st_ino, "uid": os.geteuid(),
             "pid": os.getpid()}
    if tls_cert is not None:
        certs = _CERT.findall(Path(tls_cert).read_text())
        if not certs:
            raise ValueError(f"{tls_cert} holds no certificate (-----BEGIN CERTIFICATE-----)")
        _write_public(folder / CERT_NAME, "\n".join(certs) + "\n")
    else:
        try:
            (folder / CERT_NAME).unlink()  # an old one would pin a certificate no longer served
        except FileNotFoundError:
            pass
    _write_public(folder / IDENTITY_NAME, json.dumps(ident) + "\n")
    return ident


def remove_identity(folder: Path, ident: dict) -> None:
    """Remove ``folder/server.id`` if it is still ``ident`` (not a newer server's)."""
    path = folder / IDENTITY_NAME
    try:
        if json.loads(path.read_text()) == ident:
            path.unlink()
    except (OSError, ValueError):
        pass


def read_identity(folder: Path) -> dict:
    """The identity in ``folder/server.id``; NotTheServer if missing or not to be believed."""
    path = Path(folder) / IDENTITY_NAME
    try:
        st = os.stat(path)
        ident = json.loads(path.read_text())
        uid, port, inode = int(ident["uid"]), int(ident["port"]), int(ident["inode"])
    except FileNotFoundError:
        raise NotTheServer(f"no server identity at {path} (the server writes it when it starts)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NotTheServer(f"cannot read the server identity {path}: {exc}") from None
    dst = os.stat(path.parent)
    if st.st_uid != uid or stat.S_IMODE(st.st_mode) & 0o022 or not stat.S_ISREG(st.st_mode):
        raise NotTheServer(f"{path} is not the server's own (owner uid {st.st_uid}, mode "
                           f"{stat.S_IMODE(st.st_mode):o}; the server's uid is {uid}, and no other account may write it)")
    if stat.S_IMODE(dst.st_mode) & 0o022 or dst.st_uid not in (uid, 0):
        raise NotTheServer(f"{path.parent} could be written by another account than the server's: its identity "
                           "file there proves nothing")
    return {"uid": uid, "port": port, "inode": inode}


def listeners(port: int) -> list[tuple[int, int]]:
    """``(uid, inode)`` of every TCP socket listening on ``port`` (any address), from the
    kernel's tables (Linux)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.append((int(f[7]), int(f[9])))
    return found


def check_listener(ident: dict, port: int, where: str) -> None:
    """NotTheServer unless every socket listening on ``port`` is the server's of ``ident``
    (ConnectionRefusedError if none listens)."""
    found = listeners(port)
    if not found:
        raise ConnectionRefusedError(f"nothing listens on port {port}")
    if port != ident["port"]:
        raise NotTheServer(f"{where} is port {port}, but the server's identity is for port {ident['port']}")
    if any(f != (ident["uid"], ident["inode"]) for f in found):
        raise NotTheServer(f"the process listening on port {port} is not the server whose identity is recorded "
                           f"(uid {ident['uid']}, socket {ident['inode']}; found {found}): the server may be down and "
                           "another process holding its port")


def pinned_context(cert: Path) -> tuple[ssl.SSLContext, set[bytes]]:
    """A TLS context trusting only the certificates in ``cert``, with their DER encodings: the
    server must present one of exactly these (its name is not checked: the pin is the check)."""
    try:
        pems = _CERT.findall(Path(cert).read_text())
    except OSError as exc:
        raise NotTheServer(f"cannot read the server's certificate {cert}: {exc.strerror or exc}") from None
    if not pems:
        raise NotTheServer(f"{cert} holds no certificate (-----BEGIN CERTIFICATE-----)")
    ctx = ssl.create_default_context(cadata="\n".join(pems))
    ctx.check_hostname = False
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a pinned certificate is trusted by itself
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx, {ssl.PEM_cert_to_DER_cert(p) for p in pems}
