"""What each contract posted to the ledger against what its state calls for: the check that the
exchange's contracts (:meth:`.store.ExchangeStore.check_books`) and Egg mode's
(:func:`.egg_books.check_books`) share."""

from __future__ import annotations

from collections.abc import Iterable


def check_posted(posted: dict[tuple[int, str], int], wanted: Iterable[tuple[int, str, dict[str, int]]],
                 kinds: Iterable[str], stray: str) -> None:
    """``posted``: the sum of the ledger's entries per (contract id, kind); ``wanted``: per
    contract, ``(id, label, {kind: amount})`` (the label names it in an error). AssertionError
    naming the first that does not add up.

    Steps: for each contract and each of ``kinds``, the posted sum equals the wanted amount
    (0 where none is wanted, and where none is posted); then no posted (id, kind) is left that
    no contract accounts for (``stray`` begins that error)."""
    kinds = tuple(kinds)
    seen = set()
    for cid, label, want in wanted:
        for kind in kinds:
            seen.add((cid, kind))
            got = posted.get((cid, kind), 0)
            if got != want.get(kind, 0):
                raise AssertionError(f"{label}: {kind} posted {got}, expected {want.get(kind, 0)}")
    left = set(posted) - seen
    if left:
        raise AssertionError(f"{stray}: {sorted(left)[:5]}")
