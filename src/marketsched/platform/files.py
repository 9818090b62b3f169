"""File modes of the market's data folder, set explicitly (never left to the umask).

* The data folder is ``0711``: its owner (the broker's service account) reads and writes it;
  other local accounts may only *pass through* it to a name they already know and whose own
  mode lets them in: the Unix socket ``market.sock`` (``0666``: anyone may connect, the broker
  identifies the caller by its peer credentials) and the job folders the job side gives to the
  jobs' users. They cannot list the folder.
* Every file the broker writes there (``admin.token``, ``market.db`` and SQLite's ``-wal`` and
  ``-shm`` files, which SQLite creates with the database file's mode) is ``0600``; folders of
  its own are ``0700``.

Modes are applied at every start, so a data folder made by an older version (which followed a
022 umask: 0755 folders, 0644 files) is tightened the first time a new broker opens it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DATA_MODE = 0o711
FILE_MODE = 0o600
DIR_MODE = 0o700


def data_folder(path) -> Path:
    """Create (with parents) the market's data folder and set its mode to ``DATA_MODE``.
    Refuses a symbolic link or a folder owned by another account (someone else prepared it)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(f"the market's data folder {path} must be a folder, not a link or a file")
    if st.st_uid != os.geteuid():
        raise OSError(f"the market's data folder {path} belongs to uid {st.st_uid}, not to this account "
                      f"(uid {os.geteuid()}); it must be the broker's own")
    os.chmod(path, DATA_MODE)
    return path


def private_file(path) -> None:
    """Create ``path`` if missing, empty and ``0600``, without following a symbolic link; set
    an existing file's mode to ``0600``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def write_private(path, text: str) -> None:
    """Write ``text`` to ``path`` as a ``0600`` file (replacing it; a symbolic link in its
    place is refused, not followed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, FILE_MODE)
        f.write(text)


def tighten(path) -> None:
    """Set an existing regular file's mode to ``0600`` (missing files and links are left alone)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != FILE_MODE:
        os.chmod(path, FILE_MODE)


class short_socket_path:
    """A path for ``bind``/``connect`` of the Unix socket at ``path``, short enough for the
    kernel's 108-byte limit: ``path`` itself, or ``/proc/self/fd/N/NAME`` through a descriptor
    of its folder (a context manager; the descriptor is closed after)."""

    def __init__(self, path):
        self.path = Path(path)
        self.fd: int | None = None

    def __enter__(self) -> str:
        if len(os.fsencode(self.path)) < 100:
            return str(self.path)
        self.fd = os.open(self.path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self.fd}/{self.path.name}"

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
