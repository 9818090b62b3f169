"""A local cache of parsed SWF logs, as NumPy columns keyed by the file's sha256.

Parsing a gzipped archive log takes a good part of a second; loading its columns back takes
a few milliseconds. A cache file is a JSON header (format, sha256, job count, each column's
name and dtype, the log's header lines and comments) then the columns' raw bytes one after
another, each read straight into its array (no archive to unpack, no checksum pass: a
``.npz`` took twice as long). :func:`read_cached` is what :func:`marketsched.workloads.load_trace`
calls:

1. hash the file as stored (sha256 of its bytes, gzipped or not);
2. if ``<cache>/<sha256>.v<FORMAT>.columns`` exists and is sound (its header names every SWF
   field with its dtype, the recorded sha256 and format match, and the file holds exactly the
   columns' bytes), return it, its columns mapped from the file (a private copy-on-write
   mapping: a column is read from the disk, or the page cache, when first used, so the columns
   a workload does not use cost nothing, about 4 of SDSC-SP2's 6 ms; writing to a column changes
   this process's copy only; the mapping, and one file descriptor, last while a column does);
3. otherwise parse the file with :func:`marketsched.workloads.swf.read_swf` and write the
   columns, header lines and comments to a temporary file in the cache folder, then rename it
   into place (atomic: a reader never sees half a file).

A changed file has another sha256, so it is parsed again (the stale entry is simply never
read). Cache files are only ever replaced whole (a rename), never rewritten in place, which is
what a mapping needs: a file cut short under a running process's mapping would end it. A damaged or foreign cache file (cut short or grown, an unreadable or mismatched
header, another log's) is never trusted: it is ignored, and rewritten from a fresh parse;
the columns' bytes carry no checksum, as the atomic write leaves no half-written file. A malformed log is never cached: its parse raises before anything is written.
A cache folder that cannot be written is not an error; the log is then parsed every time.

Where: ``$MARKETSCHED_COLUMN_CACHE`` if set, else ``~/.cache/marketsched/columns``. Setting
``MARKETSCHED_COLUMN_CACHE=off`` (or ``0``, ``no``, ``false``, empty) disables the cache, as
does ``load_trace(..., column_cache=False)``. Deleting the folder is always safe.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path

import numpy as np

from .swf import FLOAT_FIELDS, SWF_FIELDS, SwfLog, header_of, read_swf

ENV_COLUMN_CACHE = "MARKETSCHED_COLUMN_CACHE"
#: Version of the cached layout and of the parse it stores; bump it when either changes.
FORMAT = 2
MAGIC = b"marketsched columns\n"
_OFF = {"", "0", "off", "no", "false"}


def column_cache_dir(explicit=None) -> Path | None:
    """The cache folder (``explicit``, ``$MARKETSCHED_COLUMN_CACHE`` or ``~/.cache/marketsched/columns``);
    None when the variable turns the cache off."""
    if explicit is not None:
        return Path(explicit).expanduser()
    value = os.environ.get(ENV_COLUMN_CACHE)
    if value is None:
        return Path.home() / ".cache" / "marketsched" / "columns"
    if value.strip().lower() in _OFF:
        return None
    return Path(value).expanduser()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_file(folder: Path, sha256: str) -> Path:
    return folder / f"{sha256}.v{FORMAT}.columns"


def _dtype(name: str) -> np.dtype:
    return np.dtype(np.float64 if name in FLOAT_FIELDS else np.int64)


def _load(file: Path, sha256: str, path: Path) -> SwfLog | None:
    """The cached log, or None if the file is missing, damaged or not this log's."""
    try:
        with open(file, "rb") as fh:
            if fh.read(len(MAGIC)) != MAGIC:
                return None
            size = int.from_bytes(fh.read(8), "little")
            meta = json.loads(fh.read(size).decode("utf-8"))
            if not isinstance(meta, dict):
                return None
            if meta.get("format") != FORMAT or meta.get("sha256") != sha256:
                return None
            n = int(meta["jobs"])
            if meta["columns"] != [[name, _dtype(name).str] for name in SWF_FIELDS]:
                return None
            offset = fh.tell()
            if os.fstat(fh.fileno()).st_size != offset + n * sum(_dtype(name).itemsize for name in SWF_FIELDS):
                return None
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        columns = {}
        for name in SWF_FIELDS:
            columns[name] = np.frombuffer(mapped, dtype=_dtype(name), count=n, offset=offset)
            offset += n * _dtype(name).itemsize
        pairs = [(str(k), str(v)) for k, v in meta["header_lines"]]
        comments = [str(c) for c in meta["comments"]]
    except (OSError, KeyError, TypeError, ValueError):  # JSON and Unicode errors are ValueErrors
        return None
    if any(col.shape != (n,) for col in columns.values()):
        return None
    return SwfLog(columns=columns, header=header_of(pairs), header_lines=pairs, comments=comments, path=path)


def _store(file: Path, sha256: str, log: SwfLog) -> None:
    """Write ``log`` to ``file`` atomically (temporary file, then rename); give up quietly on an OS error."""
    n = len(log.columns["job_number"])
    meta = {"format": FORMAT, "sha256": sha256, "jobs": n,
            "columns": [[name, _dtype(name).str] for name in SWF_FIELDS],
            "header_lines": [list(p) for p in log.header_lines], "comments": list(log.comments)}
    header = json.dumps(meta).encode("utf-8")
    import tempfile  # here: only a store needs it (and shutil, random), not a load from the cache

    tmp = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".part", dir=file.parent)
        tmp = Path(tmp_name)
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + len(header).to_bytes(8, "little") + header)
            for name in SWF_FIELDS:
                np.ascontiguousarray(log.columns[name], dtype=_dtype(name)).tofile(fh)
        os.replace(tmp, file)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def read_cached(path, cache_dir=None, *, enabled: bool = True) -> SwfLog:
    """:func:`read_swf` of ``path`` through the column cache (see the module docstring)."""
    path = Path(path)
    folder = column_cache_dir(cache_dir) if enabled else None
    if folder is None:
        return read_swf(path)
    raw = path.read_bytes()
    sha256 = _sha256(raw)
    file = cache_file(folder, sha256)
    log = _load(file, sha256, path)
    if log is None:
        log = read_swf(path, raw=raw)
        _store(file, sha256, log)
    return log
