"""Known Parallel Workloads Archive traces: names, download addresses, sha256, local cache.

A trace is named by its archive file name, with or without ``.swf.gz``
(``"LPC-EGEE-2004-1.2-cln"`` or ``"LPC-EGEE-2004-1.2-cln.swf.gz"``; case does not matter).
:func:`resolve_trace` turns a name or a path into a local file:

1. an existing path is used as is;
2. otherwise the folder named by ``traces_dir=`` or the environment variable
   ``MARKETSCHED_TRACES`` (a folder of archive files, e.g. a shared copy);
3. then the cache: ``cache_dir=``, ``MARKETSCHED_CACHE`` or ``~/.cache/marketsched/traces``;
4. then a download from the archive (urllib) into a temporary file in the cache, a sha256
   check, and an atomic rename. Offline, or on a bad checksum, a :class:`TraceNotFoundError` /
   :class:`ChecksumError` says what was tried and what to do.

Checksums are verified on every download; files already on disk are trusted (hashing 4 MB
on every read is wasteful) unless ``verify=True`` is passed.

Where the numbers come from: sha256, job counts and MaxProcs of the 17 files under
``shared/data/traces`` (``SHA256SUMS`` and ``MANIFEST.tsv``; those files came from public
GitHub mirrors of the archive, unmodified). The archive folder of each log (``l_<dir>``) is
taken from the archive's own links (the LPC header's ``Information:`` line gives ``l_lpc``)
and from a public download script listing the archive URLs; entries marked ``unsure`` below
were not confirmed against the live site (it was not reachable while this was written).

Anyone publishing results on these logs cites Feitelson, Tsafrir, Krakov, JPDC 74(10), 2014,
and credits the provider named on the header's ``Acknowledge:`` line.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .swf import SwfLog

ARCHIVE = "https://www.cs.huji.ac.il/labs/parallel/workload"
ENV_TRACES = "MARKETSCHED_TRACES"
ENV_CACHE = "MARKETSCHED_CACHE"


class TraceNotFoundError(FileNotFoundError):
    """A trace is neither a path, nor in the traces folder or cache, and could not be downloaded."""


class ChecksumError(ValueError):
    """A trace file's sha256 differs from the known one."""


class UnverifiedTraceWarning(UserWarning):
    """A trace was downloaded whose sha256 is not known, so it could not be checked."""


@dataclass(frozen=True)
class TraceInfo:
    """One archive log: local file name, archive address, sha256 (None if unknown), size."""

    name: str  # registry name: the file name without .swf.gz
    filename: str  # file name on disk (in a traces folder or the cache)
    url: str  # download address on the Parallel Workloads Archive
    sha256: str | None  # known checksum of ``filename``; None: not known, printed on download
    jobs: int | None  # job lines in the log (MANIFEST.tsv)
    procs: int | None  # header MaxProcs
    note: str = ""
    aliases: tuple[str, ...] = ()


def _entry(filename, folder, sha256, jobs, procs, note="", remote=None, aliases=()):
    name = filename[: -len(".swf.gz")] if filename.endswith(".swf.gz") else filename
    return TraceInfo(name, filename, f"{ARCHIVE}/{folder}/{remote or filename}", sha256, jobs, procs, note,
                     tuple(aliases))


_ENTRIES = [
    _entry("CEA-Curie-2011-2.1-cln.swf.gz", "l_cea_curie",
           "2a0fdbd40837590b491bbbac7d4cfe521de1f0b14c0dc39bbf82c4e49ea75bce", 312826, 93312),
    _entry("CTC-SP2-1996-3.1-cln.swf.gz", "l_ctc_sp2",
           "9fa28ac16c4386fb81b72a91d8bd8888281df2948a9d912769d387c5ee285bb4", 77222, 338,
           "no requested procs: allocated procs are used"),
    _entry("HPC2N-2002-2.2-cln.swf.gz", "l_hpc2n",
           "3c534857d6065cfd9cc35aac8d064c9c17172be7acf336de835006f43a626e64", 202871, 240,
           "1.29M serial jobs once split; substitute for SHARCNET WHALE"),
    _entry("KTH-SP2-1996-2.1-cln.swf.gz", "l_kth_sp2",
           "3e152f201fd2e96808a735bced6ea6eb0bb07fdc447689cafb0750d87b264c0b", 28476, 100,
           "substitute for DAS2-fs4 (Shudler et al. 2010; Stößer 2009)"),
    _entry("LANL-CM5-1994-4.1-cln.swf.gz", "l_lanl_cm5",
           "71ff3dfa301b3ee1bd30ebc63c5363b5e8ec488e75f1f9398aa46d485ef23c3c", 122060, 1024),
    # The archive's LCG-2005-1 grid trace, stored here under the name its mirror used.
    # unsure: whether the archive's LCG-2005-1.swf.gz is byte-identical to this LCG.swf.gz;
    # if not, a download fails its checksum and says so.
    _entry("LCG.swf.gz", "l_lcg",
           "cda5d512febf84a3e07b3ad7b9481f8a0ba0f4c6e10f5d639aae73d2587448d9", 188041, 24515,
           "the archive's LCG-2005-1 (170 grid sites), renamed", remote="LCG-2005-1.swf.gz",
           aliases=("LCG-2005-1",)),
    _entry("LLNL-Atlas-2006-2.1-cln.swf.gz", "l_llnl_atlas",
           "48cc83b7a0490252aa1ae41a4b03dd598bc0683e146be94047febee36e7e0b36", 43778, 9216),
    _entry("LLNL-Thunder-2007-1.1-cln.swf.gz", "l_llnl_thunder",
           "00d9bce501efd3a23cd0713bbae591516b7a69217d5f4b851725f601f3b75247", 121039, 4008,
           "requested runtime for 32% of jobs only"),
    _entry("NASA-iPSC-1993-3.1-cln.swf.gz", "l_nasa_ipsc",
           "5589ae9b2fb78e3bf92de097497cf33a91607de1ad54563e43533f7827597f29", 18239, 128,
           "no requested runtime"),
    _entry("OSC-Clust-2000-3.1-cln.swf.gz", "l_osc",
           "f2d762130a55ab26cfedc37a9f4ab55923dd07bf185912ded67628f14dbf09ab", 36097, 178,
           "no requested runtime"),
    _entry("RICC-2010-2.swf.gz", "l_ricc",
           "38b7c5c9843d9a9f3d61a2d8b927f6d39b68b368fb713886b5f2ce3499f2ec82", 447794, 8192),
    _entry("SDSC-BLUE-2000-4.2-cln.swf.gz", "l_sdsc_blue",
           "9aab21f3cfa108f3ecefa52391b384d996dcf4216f920186f47a734646b2c658", 243306, 1152,
           "9.60M serial jobs once split (9.30M by allocated procs)"),
    _entry("SDSC-DS-2004-2.1-cln.swf.gz", "l_sdsc_ds",
           "0ddb885a96a7f5ee9009d8a36ef350b1d1c451044c205811938995aac80fcc36", 96069, 1664),
    _entry("SDSC-Par-1996-3.1-cln.swf.gz", "l_sdsc_par",
           "cb1aab02b5e3c34659d1c1d6f73c002d415229c59f40c03fab4e20331abdaff7", 32135, 400,
           "no requested runtime"),
    _entry("SDSC-SP2-1998-4.2-cln.swf.gz", "l_sdsc_sp2",
           "e03fe48be50c4ab04d6bb2285296d9c3399e9c1f27ee79b754ad32a14abd9bac", 59715, 128,
           "664k serial jobs once split; substitute for SHARCNET REQUIN"),
    _entry("Sandia-Ross-2001-1.1-cln.swf.gz", "l_sandia_ross",
           "08b390c160c41c5d3a70d66c48884b5bb68aa277506988ccdc408913342b38df", 57882, 1524),
    _entry("LPC-EGEE-2004-1.2-cln.swf.gz", "l_lpc",
           "2fc37df5cc14c355fc7a88235f72e54fdf5f0d93de09399d015383ee5c35a59d", 234889, 140,
           "all serial; used by Shudler et al. 2010 and Stößer 2009"),
    # Traces the papers used that are not in the shared folder: no known checksum.
    # Job counts from Shudler et al. (2010) Table I / Stößer (2009) Table 5.1 where given
    # (DAS2-fs4: 32,626 jobs on 64 CPUs); unsure: the archive's fs0 and SHARCNET figures, left None.
    _entry("DAS2-fs4-2003-1.swf.gz", "l_das2", None, 32626, 64,
           "Shudler et al. 2010 and Stößer 2009 (64 CPUs, 48 used)"),
    _entry("DAS2-fs0-2003-1.swf.gz", "l_das2", None, None, 144, "Stößer 2009, ch. 6 (first 1,000 requests)"),
    _entry("SHARCNET-2005-2.swf.gz", "l_sharcnet", None, None, None,
           "Shudler et al. 2010, Stößer 2009: clusters WHALE and REQUIN (how to separate them: unsure)"),
]

#: Registry name -> :class:`TraceInfo`.
TRACES: dict[str, TraceInfo] = {e.name: e for e in _ENTRIES}


def _key(name: str) -> str:
    name = name.strip()
    for suffix in (".swf.gz", ".swf", ".gz"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name.lower()


_LOOKUP: dict[str, TraceInfo] = {}
for _e in _ENTRIES:
    _LOOKUP[_key(_e.name)] = _e
    for _a in _e.aliases:
        _LOOKUP[_key(_a)] = _e


def trace_info(name: str) -> TraceInfo:
    """The registry entry for ``name`` (with or without ``.swf.gz``, any case)."""
    try:
        return _LOOKUP[_key(name)]
    except KeyError:
        raise KeyError(f"unknown trace {name!r}; known traces: {', '.join(sorted(TRACES))}") from None


def configured_traces_dir(explicit=None) -> Path | None:
    """The configured traces folder (``explicit`` or ``$MARKETSCHED_TRACES``), or None."""
    value = explicit if explicit is not None else os.environ.get(ENV_TRACES)
    return Path(value).expanduser() if value else None


def configured_cache_dir(explicit=None) -> Path:
    """The download cache (``explicit``, ``$MARKETSCHED_CACHE`` or ``~/.cache/marketsched/traces``)."""
    value = explicit if explicit is not None else os.environ.get(ENV_CACHE)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "marketsched" / "traces"


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _candidates(folder: Path, info: TraceInfo) -> list[Path]:
    names = [info.filename, info.url.rsplit("/", 1)[1], f"{info.name}.swf"]
    return [folder / n for n in dict.fromkeys(names)]


def _find_in(folder: Path | None, info: TraceInfo) -> Path | None:
    if folder is None:
        return None
    for p in _candidates(folder, info):
        if p.is_file():
            return p
    return None


def verify_file(path: Path, info: TraceInfo) -> None:
    """Raise :class:`ChecksumError` if ``path`` is a gzipped copy whose sha256 differs from the known one."""
    if info.sha256 is None or not str(path).endswith(".gz"):
        return  # nothing known to check against (an unpacked .swf has a different hash)
    got = sha256_file(path)
    if got != info.sha256:
        raise ChecksumError(
            f"{path}: sha256 is {got}, expected {info.sha256} for {info.filename}. The file is damaged "
            f"or a different version; delete it and fetch it again from {info.url}"
        )


def where(name: str, *, traces_dir=None, cache_dir=None) -> tuple[str, Path | None]:
    """Where a known trace is now: ``("here", path)`` in the traces folder, ``("cached", path)``
    or ``("remote", None)``."""
    info = trace_info(name)
    found = _find_in(configured_traces_dir(traces_dir), info)
    if found:
        return "here", found
    found = _find_in(configured_cache_dir(cache_dir), info)
    if found:
        return "cached", found
    return "remote", None


# ---------------------------------------------------------------------------- download
def _fetch(url: str, dest: Path, progress: bool = True) -> None:
    """Download ``url`` into the file ``dest`` (the one network call; tests replace it)."""
    import urllib.request  # here: its HTTP client costs tens of milliseconds at start-up

    req = urllib.request.Request(url, headers={"User-Agent": "marketsched (trace download)"})
    with urllib.request.urlopen(req, timeout=60) as resp, open(dest, "wb") as out:
        total = int(resp.headers.get("Content-Length") or 0) or None
        if progress and sys.stderr.isatty():
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task(f"downloading {url.rsplit('/', 1)[1]}", total=total)
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    out.write(chunk)
                    bar.advance(task, len(chunk))
        else:
            import shutil

            shutil.copyfileobj(resp, out, 1 << 16)


def fetch(name: str, *, cache_dir=None, force: bool = False, progress: bool = True) -> Path:
    """Download a known trace into the cache (checking its sha256) and return its path.

    An already cached copy is returned unless ``force``. A trace without a known checksum is
    downloaded, its computed sha256 printed in an :class:`UnverifiedTraceWarning`.
    """
    info = trace_info(name)
    folder = configured_cache_dir(cache_dir)
    dest = folder / info.filename
    if dest.is_file() and not force:
        return dest
    import tempfile  # here, as urllib below: the download's modules are not needed to read a trace
    import urllib.error

    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{info.filename}.", suffix=".part", dir=folder)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            _fetch(info.url, tmp, progress=progress)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise TraceNotFoundError(
                f"could not download trace {info.name!r} from {info.url}: {getattr(exc, 'reason', exc)}. "
                f"If you are offline, download the file by hand into {folder}/, or set {ENV_TRACES} to a "
                f"folder that holds {info.filename}, or pass the file's path."
            ) from exc
        got = sha256_file(tmp)
        if info.sha256 is None:
            warnings.warn(
                f"downloaded {info.filename} with sha256 {got}: no known checksum for this trace, so it "
                f"could not be checked",
                UnverifiedTraceWarning,
                stacklevel=2,
            )
        elif got != info.sha256:
            raise ChecksumError(
                f"downloaded {info.url} but its sha256 is {got}, expected {info.sha256}; the file was not "
                f"kept. The archive may have published a new version, or the download was damaged: try "
                f"again, or put a checked copy in {folder}/ or in ${ENV_TRACES}."
            )
        os.replace(tmp, dest)  # atomic within one folder
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


# ---------------------------------------------------------------------------- resolve
def resolve_trace(name_or_path, *, traces_dir=None, cache_dir=None, download: bool = True,
                  verify: bool = False, progress: bool = True) -> Path:
    """A local file for a trace name or path (order of search in the module docstring).

    ``verify=True`` also checks the sha256 of a file found in the traces folder or cache.
    """
    as_path = Path(os.fspath(name_or_path)).expanduser()
    if as_path.is_file():
        return as_path
    try:
        info = trace_info(str(name_or_path))
    except KeyError:
        raise TraceNotFoundError(
            f"{name_or_path!r} is neither an existing file nor a known trace name; known traces: "
            f"{', '.join(sorted(TRACES))}"
        ) from None
    folder = configured_traces_dir(traces_dir)
    tried = []
    found = _find_in(folder, info)
    tried.append(f"traces folder {folder}" if folder else f"traces folder (${ENV_TRACES} not set)")
    if found is None:
        cache = configured_cache_dir(cache_dir)
        found = _find_in(cache, info)
        tried.append(f"cache {cache}")
    if found is not None:
        if verify:
            verify_file(found, info)
        return found
    if not download:
        raise TraceNotFoundError(
            f"trace {info.name!r} not found (tried {'; '.join(tried)}) and downloading is off; run "
            f"`marketsched traces fetch {info.name}` or set {ENV_TRACES}"
        )
    try:
        return fetch(info.name, cache_dir=cache_dir, progress=progress)
    except TraceNotFoundError as exc:
        raise TraceNotFoundError(f"trace {info.name!r}: tried {'; '.join(tried)}; then {exc}") from exc


def load_trace(name_or_path, *, column_cache: bool = True, **kwargs) -> SwfLog:
    """:func:`read_swf` of :func:`resolve_trace` (same keyword arguments), through the local cache of
    parsed columns (:mod:`marketsched.workloads.column_cache`; ``column_cache=False`` bypasses it);
    a ``.json`` file is a Batsim workload (:func:`marketsched.workloads.batsim.read_workload`)."""
    from .batsim import is_batsim, read_workload
    from .column_cache import read_cached

    path = resolve_trace(name_or_path, **kwargs)
    if is_batsim(path):  # a Batsim workload (JSON); read directly, it is not SWF
        return read_workload(path)
    return read_cached(path, enabled=column_cache)
