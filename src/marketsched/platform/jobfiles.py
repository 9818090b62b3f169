"""Files in jobs' folders, opened without following links, and the broker's state files.

A job's folder (``ROOT/job-ID``) belongs to the job's user, who may put anything in it while the
job runs: a symbolic link named ``stdout`` pointing at ``/etc/shadow``, a FIFO, a hard link to
someone else's file. The broker (root, in a multi-user market) must never read or write through
such a thing. Every access here therefore goes through a file descriptor of ``ROOT`` (owned by
the broker; users cannot rename or replace entries in it), then of the job's folder opened with
``O_DIRECTORY | O_NOFOLLOW``, then of the file opened with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so
a FIFO cannot block the broker) and checked with ``fstat``: a regular file with one link. Files
the broker writes into the folder are unlinked first and created with ``O_EXCL``.

The broker's own records about a job (which process and cgroups it started for it) are *not*
in the job's folder, where the user could forge them: they are ``ROOT/job-ID.proc``, written
atomically (temporary file, then ``rename``) in the broker-owned ``ROOT`` with mode 0600.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class JobFileError(OSError):
    """A job's file is not what the broker may touch (a link, a FIFO, a hard link, ...)."""


def open_root(root: Path, mode: int = 0o711, owner: int | None = None) -> int:
    """Create (``mode``) and open the jobs' folder ``root``, which must belong to ``owner``
    (default: this process's account); returns a directory fd."""
    root = Path(root)
    owner = os.geteuid() if owner is None else owner
    root.mkdir(parents=True, exist_ok=True, mode=mode)
    fd = os.open(root, O_DIR)
    st = os.fstat(fd)
    if st.st_uid != owner:
        os.close(fd)
        raise JobFileError(f"jobs folder {root} belongs to uid {st.st_uid}, not to the broker ({owner})")
    if stat.S_IMODE(st.st_mode) & 0o022:
        os.fchmod(fd, mode)  # nobody else may add or rename entries in it
    return fd


def open_jobdir(root_fd: int, name: str, create: bool = False, uid: int | None = None, gid: int | None = None) -> int:
    """The job folder ``name`` under the jobs' folder (never through a link); with ``create``,
    made if missing, owned by ``uid``:``gid`` (when given) and mode 0700."""
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=root_fd)
        except FileExistsError:
            pass
    try:
        fd = os.open(name, O_DIR, dir_fd=root_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise JobFileError(f"job folder {name} is not a folder") from None
        raise
    if create:
        try:
            if uid is not None:
                os.fchown(fd, uid, gid if gid is not None else -1)
            os.fchmod(fd, 0o700)
        except OSError:
            os.close(fd)
            raise
    return fd


def _check(fd: int, name: str, owners: tuple[int, ...] | None = None) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise JobFileError(f"job file {name} is not a regular file")
    if st.st_nlink != 1:
        raise JobFileError(f"job file {name} has {st.st_nlink} links (a hard link is never written or read)")
    if owners is not None and st.st_uid not in owners:
        raise JobFileError(f"job file {name} belongs to uid {st.st_uid}")
    return st


def _open(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise JobFileError(f"job file {name} is a symbolic link: not followed") from None
        if exc.errno == errno.ENXIO:
            raise JobFileError(f"job file {name} is not a regular file") from None
        raise


def replace_file(dir_fd: int, name: str, data: bytes, uid: int | None = None, gid: int | None = None,
                 mode: int = 0o600) -> None:
    """Write ``name`` afresh in the job folder: whatever was there (a link included) is unlinked
    first, and the new file is created exclusively; owned by ``uid``:``gid`` when given."""
    unlink(dir_fd, name)
    fd = _open(dir_fd, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        if uid is not None:
            os.fchown(fd, uid, gid if gid is not None else -1)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def open_append(dir_fd: int, name: str, uid: int | None = None, gid: int | None = None) -> int:
    """An fd appending to ``name`` in the job folder (created if missing, owned by
    ``uid``:``gid``); refuses links, FIFOs, hard links and files of anyone else."""
    fd = _open(dir_fd, name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        owners = (os.geteuid(),) if uid is None else (os.geteuid(), uid)
        st = _check(fd, name, owners)
        if uid is not None and st.st_uid != uid:
            os.fchown(fd, uid, gid if gid is not None else -1)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unlink(dir_fd: int, name: str) -> None:
    """Remove ``name`` from the job folder if it is there (a link is removed, never followed)."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise JobFileError(f"job file {name} is a folder") from None


@contextlib.contextmanager
def _job_file(root: Path, folder: str, name: str) -> Iterator[tuple[int, os.stat_result] | None]:
    """``root/folder/name`` opened for reading (its fd and ``fstat``), or None if it is missing;
    a link or anything but a regular file with one link raises :class:`JobFileError`."""
    try:
        rfd = os.open(root, O_DIR)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            dfd = open_jobdir(rfd, folder)
        except FileNotFoundError:
            yield None
            return
        try:
            try:
                fd = _open(dfd, name, os.O_RDONLY)
            except FileNotFoundError:
                yield None
                return
            try:
                yield fd, _check(fd, name)
            finally:
                os.close(fd)
        finally:
            os.close(dfd)
    finally:
        os.close(rfd)


def read_tail(root: Path, folder: str, name: str, size: int) -> str:
    """The last ``size`` bytes of ``root/folder/name`` as text ("" if it is missing); a link or
    anything but a regular file with one link raises :class:`JobFileError`."""
    with _job_file(root, folder, name) as got:
        if got is None or size <= 0:
            return ""
        fd, st = got
        os.lseek(fd, max(0, st.st_size - size), os.SEEK_SET)
        chunks, left = [], size
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks).decode(errors="replace")


def read_exit_code(workdir: Path) -> int | None:
    """The exit status the job's wrapper wrote to ``exit_code`` in ``workdir`` (None if missing,
    malformed, or not a plain file)."""
    workdir = Path(workdir)
    try:
        text = read_tail(workdir.parent, workdir.name, "exit_code", 64)
        return int(text.strip()) if text.strip() else None
    except (OSError, ValueError):
        return None


def read_exit_time(workdir: Path) -> float | None:
    """When the job's wrapper wrote its exit status: the modification time of ``exit_code`` in
    ``workdir`` (the wrapper writes ``exit_code.tmp`` as the job's command ends and renames it,
    which keeps the time), on this machine's wall clock; None if missing or not a plain file."""
    workdir = Path(workdir)
    try:
        with _job_file(workdir.parent, workdir.name, "exit_code") as got:
            return None if got is None else got[1].st_mtime
    except OSError:
        return None


# ---------------------------------------------------------------------------- the broker's records
def state_path(root: Path, key) -> Path:
    return Path(root) / f"job-{key}.proc"


def write_state(root: Path, key, record: dict) -> None:
    """Record what the broker started for job ``key`` (atomic: a reader sees the old or the new
    record, never a part); mode 0600 in the broker's jobs folder."""
    path = state_path(root, key)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def read_state(root: Path, key) -> dict | None:
    try:
        with open(state_path(root, key)) as f:
            rec = json.load(f)
        return rec if isinstance(rec, dict) else None
    except (OSError, ValueError):
        return None


def remove_state(root: Path, key) -> None:
    try:
        os.unlink(state_path(root, key))
    except FileNotFoundError:
        pass


def recorded_keys(root: Path) -> list[str]:
    """Keys of every state file in ``root`` (as strings)."""
    out = []
    for p in Path(root).glob("job-*.proc"):
        out.append(p.name[4:-5])
    return sorted(out)
