"""How both markets print a statement (``marketsched.platform.statement``)."""

from marketsched.platform.statement import echo_statement, money


def test_statement_columns_line_up_whatever_the_kinds(capsys):
    """The exchange's ledger kinds (``provider-price``, ``user-deposit``) are longer than the
    market's; the amounts still form one column."""
    entries = [{"id": 1, "t": 0.0, "kind": "deposit", "signed": 10.0, "job_id": None},
               {"id": 2, "t": 1.5, "kind": "provider-price", "signed": -2.25, "job_id": 7},
               {"id": 3, "t": 2.0, "kind": "charge", "signed": -0.5, "job_id": 8}]
    echo_statement({"balance": 7.25, "entries": entries}, ref="contract")
    lines = capsys.readouterr().out.splitlines()
    ends = {line.index(f"{e['signed']:+.6f}") + len(f"{e['signed']:+.6f}") for line, e in zip(lines, entries)}
    assert len(ends) == 1, lines  # right-aligned amounts end in the same column
    assert lines[1].endswith("contract 7") and lines[-1] == "balance 7.25"


def test_market_kinds_keep_the_eight_column_kind_field(capsys):
    echo_statement({"balance": 1.0, "entries": [{"id": 1, "t": 0.0, "kind": "deposit", "signed": 1.0, "job_id": None}]})
    assert capsys.readouterr().out.splitlines()[0] == f"{1:>6} {0.0:>10.2f} {'deposit':<8} {1.0:>+14.6f}  "
    assert money(1.5) == "1.5" and money(0) == "0" and money(None) == "-"
