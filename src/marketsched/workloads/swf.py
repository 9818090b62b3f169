"""Reader for the Standard Workload Format (SWF) of the Parallel Workloads Archive.

Source: D. G. Feitelson, D. Tsafrir, D. Krakov, "Experience with using the Parallel
Workloads Archive", JPDC 74(10), 2014, and the format definition at
https://www.cs.huji.ac.il/labs/parallel/workload/swf.html . Anyone publishing results on an
archive log cites that paper and credits the provider named on the header's ``Acknowledge:``
line (kept in :attr:`SwfLog.header`).

An SWF file is a block of header comments (lines starting with ``;``, most of the form
``; Key: value``) followed by one line per job with 18 whitespace-separated numeric fields;
``-1`` means "unknown". :func:`read_swf` returns all 18 fields as NumPy columns named after
the archive's field names in snake_case (:data:`SWF_FIELDS`).

Steps of :func:`read_swf`:

1. detect gzip by its magic bytes (``1f 8b``), whatever the file's suffix;
2. read the leading comment block as the header (every ``; Key: value`` line is kept, in order);
3. parse the job lines in one vectorised NumPy pass over the bytes (:func:`_parse_fast`; about
   0.1 s for HPC2N's 203k lines), which takes plain decimal numbers only;
4. if that pass declines (a number such as ``1e3``, a line of the wrong length, a letter), parse
   the lines one by one with :class:`float` (:func:`_parse_slow`), which either gives the same
   columns or raises :class:`SwfFormatError` naming the file, the 1-based line number and what
   is wrong with the first bad line.

:func:`marketsched.workloads.load_trace` keeps each parsed log in a local cache of columns
(:mod:`marketsched.workloads.column_cache`), so a trace is parsed once per file version.

Decisions taken here (the format leaves them open):

- Time and memory fields are ``float64`` (``average_cpu_time`` is fractional in HPC2N, OSC,
  SDSC-*); all other fields are ``int64`` and must hold whole numbers.
- Comment lines after the first job line are allowed and skipped (as the archive's own tools
  do); only the leading block is the header.
- A literal ``nan``/``inf`` is malformed: the format has no such values (unknown is ``-1``).
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: The 18 standard SWF fields, in file order (snake_case of the archive's names).
SWF_FIELDS: tuple[str, ...] = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_procs",
    "average_cpu_time",
    "used_memory",
    "requested_procs",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)

#: Fields stored as float64 (times and memory); every other field is int64.
FLOAT_FIELDS: frozenset[str] = frozenset(
    {"submit_time", "wait_time", "run_time", "average_cpu_time", "used_memory", "requested_time",
     "requested_memory", "think_time"}
)

_GZIP_MAGIC = b"\x1f\x8b"
_HEADER_RE = re.compile(r"^;\s*([A-Za-z][\w\-]*)\s*:\s?(.*)$")
_LEADING_INT = re.compile(r"^\s*(-?\d+)")


class SwfFormatError(ValueError):
    """A malformed SWF file; the message names the file, the 1-based line and the problem."""


@dataclass(frozen=True, eq=False)
class SwfLog:
    """An SWF log as columns: ``log.run_time`` or ``log["run_time"]`` is a NumPy array.

    ``header`` maps each header key to its value (repeated keys such as ``Note`` are joined
    with newlines); ``header_lines`` keeps every ``(key, value)`` pair in file order;
    ``comments`` keeps header lines that are not ``Key: value`` pairs.
    """

    columns: dict[str, np.ndarray]
    header: dict[str, str] = field(default_factory=dict)
    header_lines: list[tuple[str, str]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    path: Path | None = None

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("columns", {})
        if name in cols:
            return cols[name]
        raise AttributeError(f"SwfLog has no attribute or field {name!r}")

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"{name!r} is not an SWF field; fields are {', '.join(SWF_FIELDS)}") from None

    def __len__(self) -> int:
        return int(self.columns["job_number"].shape[0])

    def _header_int(self, key: str) -> int | None:
        value = self.header.get(key)
        if value is None:
            return None
        m = _LEADING_INT.match(value.split("\n")[0])
        return int(m.group(1)) if m else None

    @property
    def max_procs(self) -> int | None:
        """``MaxProcs`` as an integer (leading number: ``"1664 (72, 1368, 224)"`` -> 1664)."""
        return self._header_int("MaxProcs")

    @property
    def max_nodes(self) -> int | None:
        """``MaxNodes`` as an integer (leading number: ``"70  (dual)"`` -> 70)."""
        return self._header_int("MaxNodes")

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.columns)

    def __repr__(self) -> str:
        name = self.path.name if self.path else "?"
        return f"SwfLog({name!r}, jobs={len(self)}, MaxProcs={self.max_procs})"


# ---------------------------------------------------------------------------- reading
def _read_bytes(path: Path, raw: bytes | None = None) -> bytes:
    if raw is None:
        with open(path, "rb") as fh:
            raw = fh.read()
    if raw[:2] == _GZIP_MAGIC:
        import gzip  # here: a trace loaded from the column cache is never parsed

        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise SwfFormatError(f"{path}: damaged gzip data ({exc})") from exc
    return raw


def header_of(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Header dict of ``(key, value)`` pairs in file order; a repeated key's values joined by newlines."""
    header: dict[str, str] = {}
    for key, value in pairs:
        header[key] = f"{header[key]}\n{value}" if key in header else value
    return header


def _parse_header(data: bytes) -> tuple[list[tuple[str, str]], list[str], int]:
    """Leading comment block -> (header_lines, comments, byte offset of the first job line)."""
    pairs: list[tuple[str, str]] = []
    comments: list[str] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        stripped = data[pos:end].decode("latin-1").strip()  # names may be non-ASCII; job lines are ASCII
        if stripped and not stripped.startswith(";"):
            break
        pos = end
        if not stripped:
            continue
        m = _HEADER_RE.match(stripped)
        if m:
            pairs.append((m.group(1), m.group(2).strip()))
        elif stripped.strip("; \t"):
            comments.append(stripped.lstrip(";").strip())
    return pairs, comments, pos


def _parse_slow(text: str, path: Path, first_line: int) -> np.ndarray:
    """Job lines parsed one by one with :class:`float`: the reference the fast pass must agree
    with, used when it declines (unusual but valid numbers such as ``1e3``) and to name the first
    bad line (``first_line``: 1-based number of the first line of ``text``)."""
    rows = []
    for lineno, line in enumerate(text.split("\n"), start=first_line):
        body = line.split(";", 1)[0].split()
        if not body:
            continue
        if len(body) != len(SWF_FIELDS):
            raise SwfFormatError(
                f"{path}, line {lineno}: expected {len(SWF_FIELDS)} fields, found {len(body)}: {line.strip()[:120]!r}"
            )
        row = []
        for name, token in zip(SWF_FIELDS, body):
            try:
                if "_" in token:  # float() accepts 1_000; the format does not
                    raise ValueError(token)
                value = float(token)
            except ValueError:
                raise SwfFormatError(f"{path}, line {lineno}: field {name!r} is not a number: {token!r}") from None
            if not math.isfinite(value):
                raise SwfFormatError(f"{path}, line {lineno}: field {name!r} is not a finite number: {token!r}")
            if name not in FLOAT_FIELDS and value != round(value):
                raise SwfFormatError(f"{path}, line {lineno}: field {name!r} must be a whole number, got {token!r}")
            row.append(value)
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(SWF_FIELDS))


_POW10 = 10.0 ** np.arange(23)  # exact in float64 up to 1e22
_CHUNK = 1 << 18  # bytes per vectorised step: its temporary arrays stay in the processor's cache
_MAX_CHARS = 15  # a token of at most 15 characters holds an integer mantissa below 10**15 < 2**53


def _parse_fast_chunk(buf: bytes) -> np.ndarray | None:
    """Numbers of whole job lines ``buf`` (no comments) as an ``(n, 18)`` array, or None to decline.

    Vectorised over bytes. It accepts only tokens ``-?digits[.digits]`` of at most 15 characters
    and lines of exactly 18 tokens. A token's characters, read as digits ('-' and '.' as 0), give
    an exact integer; dropping the dot's 0 gives the mantissa, and the value is ``mantissa /
    10**decimals``: one correctly rounded division, the same double :class:`float` returns.
    """
    b = np.frombuffer(buf, dtype=np.uint8)
    inside = b > 32  # inside a token: digit, '-' or '.' (anything else declines below)
    if np.any((b > 57) | (b == 47) | ((b < 45) & inside) | (~inside & (b != 32) & (b != 10) & (b != 9) & (b != 13))):
        return None
    pos = np.flatnonzero(inside)  # bytes inside tokens
    if pos.shape[0] == 0:
        return np.empty((0, len(SWF_FIELDS)))
    first = np.empty(pos.shape[0], dtype=bool)
    first[0] = True
    np.not_equal(np.diff(pos), 1, out=first[1:])
    starts = np.flatnonzero(first)  # index into pos of each token's first byte
    n_tokens = starts.shape[0]
    # 18 tokens a line: the first token after each run of newlines is token 18, 36, ...
    after_newline = np.searchsorted(pos[starts], np.flatnonzero(b == 10))
    after_newline = after_newline[(after_newline > 0) & (after_newline < n_tokens)]
    line_starts = after_newline[np.diff(after_newline, prepend=-1) != 0]
    if n_tokens % len(SWF_FIELDS) or not np.array_equal(
        line_starts, np.arange(len(SWF_FIELDS), n_tokens, len(SWF_FIELDS))
    ):
        return None
    lengths = np.diff(starts, append=pos.shape[0])
    if lengths.max() > _MAX_CHARS:
        return None
    ends = starts + lengths - 1
    place = np.repeat(ends, lengths) - np.arange(pos.shape[0])  # characters after it in its token
    chars = b[pos]
    digits = np.where(chars >= 48, chars - 48, 0)
    number = np.add.reduceat(digits * _POW10[place], starts)
    minus = np.flatnonzero(chars == 45)
    dots = np.flatnonzero(chars == 46)
    minus_token = np.searchsorted(starts, minus, side="right") - 1
    dot_token = np.searchsorted(starts, dots, side="right") - 1
    signs_dots = np.bincount(minus_token, minlength=n_tokens) + np.bincount(dot_token, minlength=n_tokens)
    if np.any(signs_dots >= lengths):  # a token without a digit ("-", ".")
        return None
    if np.any(starts[minus_token] != minus):  # a minus inside a token
        return None
    if np.any(np.diff(dot_token) == 0):  # two dots in a token
        return None
    decimals = ends[dot_token] - dots
    whole = number[dot_token].astype(np.int64)
    scale = 10 ** decimals
    mantissa = (whole // (10 * scale)) * scale + whole % scale  # the dot's 0 taken out
    number[dot_token] = mantissa / _POW10[decimals]
    number[minus_token] *= -1.0
    return number.reshape(-1, len(SWF_FIELDS))


def _parse_fast(body: bytes) -> np.ndarray | None:
    """:func:`_parse_fast_chunk` over the job lines in chunks of whole lines, or None to decline."""
    if b";" in body:  # comments among the job lines: drop them, keep the numbers before any ';'
        body = b"\n".join(line.split(b";", 1)[0] for line in body.split(b"\n"))
    parts = []
    pos = 0
    while pos < len(body):
        end = body.find(b"\n", min(pos + _CHUNK, len(body)))
        end = len(body) if end < 0 else end + 1
        part = _parse_fast_chunk(body[pos:end])
        if part is None:
            return None
        parts.append(part)
        pos = end
    return np.concatenate(parts) if parts else np.empty((0, len(SWF_FIELDS)))


def read_swf(path, *, raw: bytes | None = None) -> SwfLog:
    """Read an SWF file (plain or gzipped) into an :class:`SwfLog` (see the module docstring).

    ``raw``: the file's bytes when the caller has read them already. Raises
    :class:`FileNotFoundError` if the file does not exist and :class:`SwfFormatError` (a
    :class:`ValueError`) naming file and 1-based line number for a malformed job line.
    """
    path = Path(path)
    data = _read_bytes(path, raw)
    pairs, comments, offset = _parse_header(data)
    body = data[offset:]
    table = _parse_fast(body)
    ints = [j for j, name in enumerate(SWF_FIELDS) if name not in FLOAT_FIELDS]
    if table is None or not np.array_equal(table[:, ints], np.round(table[:, ints])):
        first_line = data.count(b"\n", 0, offset) + 1
        table = _parse_slow(body.decode("latin-1"), path, first_line)
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(SWF_FIELDS):
        col = np.ascontiguousarray(table[:, j])
        columns[name] = col if name in FLOAT_FIELDS else col.astype(np.int64)
    return SwfLog(columns=columns, header=header_of(pairs), header_lines=pairs, comments=comments, path=path)


def write_swf(log_or_columns, path, header: dict[str, str] | list[tuple[str, str]] | None = None) -> Path:
    """Write columns (an :class:`SwfLog` or a dict of the 18 fields) as a plain or gzipped SWF file.

    Gzip is used when ``path`` ends in ``.gz``. Meant for tests and small derived logs.
    """
    path = Path(path)
    if isinstance(log_or_columns, SwfLog):
        cols = log_or_columns.columns
        header = log_or_columns.header_lines if header is None else header
    else:
        cols = log_or_columns
    missing = [f for f in SWF_FIELDS if f not in cols]
    if missing:
        raise ValueError(f"write_swf: missing SWF fields {missing}")
    n = len(cols["job_number"])
    pairs = list(header.items()) if isinstance(header, dict) else list(header or [])
    lines = [f"; {k}: {v}" for k, v in pairs]
    table = np.column_stack([np.asarray(cols[f], dtype=np.float64) for f in SWF_FIELDS]) if n else None
    body = io.StringIO()
    if table is not None:
        np.savetxt(body, table, fmt="%.10g")
    text = "\n".join(lines) + ("\n" if lines else "") + body.getvalue()
    data = text.encode()
    if path.suffix == ".gz":
        import gzip

        data = gzip.compress(data)
    path.write_bytes(data)
    return path
