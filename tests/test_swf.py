import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketsched.workloads.swf import SWF_FIELDS, SwfFormatError, read_swf, write_swf

HEADER = """; Version: 2.2
; Computer: Test machine
;       MaxNodes: 70  (dual)
;       MaxProcs: 140
; Note: first note
; Note: second note: with a colon
; free text without a key
;
"""
JOBS = [
    "1 0 5 100 1 -1 -1 1 3600 -1 1 7 1 -1 2 -1 -1 -1",
    "2 10 0 -1 0 -1 -1 4 -1 -1 5 8 1 -1 2 -1 -1 -1",
    "3 20 1 0 2 12.5 -1 2 60 -1 1 7 1 -1 2 -1 -1 -1",
]


def write(path, text, gz=False):
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz, name", [(False, "t.swf"), (True, "t.swf.gz"), (True, "no_suffix")])
def test_reads_fields_and_header_plain_and_gzip(tmp_path, gz, name):
    path = write(tmp_path / name, HEADER + "\n".join(JOBS) + "\n", gz=gz)
    log = read_swf(path)
    assert len(log) == 3
    assert set(log.columns) == set(SWF_FIELDS) and len(SWF_FIELDS) == 18
    assert log.job_number.tolist() == [1, 2, 3] and log.job_number.dtype == np.int64
    assert log["run_time"].tolist() == [100.0, -1.0, 0.0] and log.run_time.dtype == np.float64
    assert log.requested_procs.tolist() == [1, 4, 2]
    assert log.average_cpu_time[2] == 12.5
    assert log.status.tolist() == [1, 5, 1]
    assert log.think_time.tolist() == [-1, -1, -1]
    assert log.header["MaxProcs"] == "140" and log.max_procs == 140
    assert log.header["MaxNodes"] == "70  (dual)" and log.max_nodes == 70
    assert log.header["Note"] == "first note\nsecond note: with a colon"
    assert ("Computer", "Test machine") in log.header_lines
    assert log.comments == ["free text without a key"]


def test_missing_max_procs_and_unknown_field(tmp_path):
    log = read_swf(write(tmp_path / "a.swf", JOBS[0] + "\n"))
    assert log.max_procs is None and log.max_nodes is None and log.header == {}
    with pytest.raises(KeyError, match="not an SWF field"):
        log["runtime"]
    with pytest.raises(AttributeError):
        log.runtime


def test_header_only_file_is_empty_log(tmp_path):
    log = read_swf(write(tmp_path / "e.swf", HEADER))
    assert len(log) == 0 and log.max_procs == 140


@pytest.mark.parametrize("text", ["", HEADER, "\n\n"])
def test_workload_of_a_file_without_jobs_is_an_error_naming_it(tmp_path, text):
    from marketsched.scenario import WorkloadSpec

    path = write(tmp_path / "empty.swf", text)
    with pytest.raises(ValueError) as err:
        WorkloadSpec(trace=str(path)).build()
    assert str(path) in str(err.value) and "has no job lines" in str(err.value)


def test_workload_whose_every_job_is_rejected_says_how_many_and_why(tmp_path):
    from marketsched.scenario import WorkloadSpec

    # job 2 of JOBS is cancelled (run time -1); a copy of job 1 on 0 processors; one 200 wide on 140
    lines = [JOBS[1], "5 40 0 10 0 -1 -1 -1 60 -1 1 7 1 -1 2 -1 -1 -1",
             "6 50 0 10 200 -1 -1 200 60 -1 1 7 1 -1 2 -1 -1 -1", JOBS[1].replace("2 10", "7 60", 1)]
    path = write(tmp_path / "bad.swf", HEADER + "\n".join(lines) + "\n")
    with pytest.raises(ValueError) as err:
        WorkloadSpec(trace=str(path)).build()
    msg = str(err.value)
    assert str(path) in msg and "all 4 job lines were rejected" in msg
    assert "2 cancelled or never ran" in msg and "1 processors <= 0" in msg and "1 needs more processors" in msg


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("4 30 0 10 1 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1", "expected 18 fields, found 17"),
        ("4 30 0 10 1 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1 9", "expected 18 fields, found 19"),
        ("4 30 0 ten 1 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1", "field 'run_time' is not a number: 'ten'"),
        ("4 30 0 10 1.5 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1", "field 'allocated_procs' must be a whole number"),
        ("4 30 0 nan 1 -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1", "field 'run_time' is not a finite number"),
    ],
)
@pytest.mark.parametrize("gz", [False, True])
def test_malformed_line_names_file_and_line(tmp_path, bad_line, message, gz):
    # header has 8 lines, then 3 good jobs, so the bad one is line 12
    text = HEADER + "\n".join(JOBS) + "\n" + bad_line + "\n" + JOBS[0] + "\n"
    path = write(tmp_path / ("bad.swf.gz" if gz else "bad.swf"), text, gz=gz)
    with pytest.raises(SwfFormatError, match="line 12") as err:
        read_swf(path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_swf(tmp_path / "nope.swf")


def test_damaged_gzip(tmp_path):
    data = gzip.compress((HEADER + "\n".join(JOBS)).encode())
    (tmp_path / "d.swf.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(SwfFormatError, match="d.swf.gz"):
        read_swf(tmp_path / "d.swf.gz")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 10**7), min_size=18, max_size=18), min_size=1, max_size=20),
       st.booleans())
def test_write_read_round_trip(tmp_path_factory, rows, gz):
    table = np.array(rows, dtype=np.int64)
    cols = {f: table[:, j] for j, f in enumerate(SWF_FIELDS)}
    path = tmp_path_factory.mktemp("rt") / ("r.swf.gz" if gz else "r.swf")
    write_swf(cols, path, header={"MaxProcs": "64", "Note": "round trip"})
    log = read_swf(path)
    assert log.max_procs == 64 and log.header["Note"] == "round trip"
    for f in SWF_FIELDS:
        np.testing.assert_array_equal(log[f], cols[f])


@pytest.mark.trace
def test_real_traces_lpc_and_kth(trace_path):
    lpc = read_swf(trace_path("LPC-EGEE-2004-1.2-cln"))
    assert len(lpc) == 234_889
    assert lpc.max_procs == 140 and lpc.header["MaxProcs"] == "140"
    assert lpc.max_nodes == 70
    assert "Emmanuel Medernach" in lpc.header["Acknowledge"]
    assert int((lpc.run_time >= 0).sum()) == 220_695  # the shared README's figure
    kth = read_swf(trace_path("KTH-SP2-1996-2.1-cln"))
    assert len(kth) == 28_476 and kth.max_procs == 100


def _token(draw_int, frac_digits):
    return draw_int if frac_digits is None else f"{draw_int}.{frac_digits}"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-10**8, 10**9), st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=4))),
                min_size=18 * 3, max_size=18 * 3))
def test_fast_parse_gives_the_doubles_float_gives(tokens):
    # float fields get fractions (tokens of up to 15 characters, the fast pass's own); it must
    # agree with float() to the last bit
    from marketsched.workloads.swf import FLOAT_FIELDS, _parse_fast

    rows = []
    for r in range(3):
        row = []
        for j, name in enumerate(SWF_FIELDS):
            whole, frac = tokens[18 * r + j]
            row.append(_token(whole, frac if name in FLOAT_FIELDS else None))
        rows.append(row)
    body = "\n".join("  ".join(map(str, row)) for row in rows).encode()
    fast = _parse_fast(body)
    want = np.array([[float(t) for t in row] for row in rows])
    assert fast is not None and fast.tobytes() == want.tobytes()


@pytest.mark.parametrize("variant", ["crlf", "tabs", "comments", "exponent", "plus", "no_final_newline", "blank"])
def test_unusual_but_valid_layouts_read_as_the_plain_file(tmp_path, variant):
    plain = read_swf(write(tmp_path / "plain.swf", HEADER + "\n".join(JOBS) + "\n"))
    lines = list(JOBS)
    text = HEADER + "\n".join(lines) + "\n"
    if variant == "crlf":
        text = text.replace("\n", "\r\n")
    elif variant == "tabs":
        text = text.replace(" 0 ", "\t0\t")
    elif variant == "comments":
        text = HEADER + f"{JOBS[0]}\n; a comment among jobs\n{JOBS[1]} ; trailing\n{JOBS[2]}\n"
    elif variant == "exponent":
        text = text.replace("3600", "3.6e3")
    elif variant == "plus":
        text = text.replace(" 3600 ", " +3600 ")
    elif variant == "no_final_newline":
        text = text.rstrip("\n")
    else:
        text = HEADER + f"{JOBS[0]}\n\n   \n{JOBS[1]}\n{JOBS[2]}\n\n"
    log = read_swf(write(tmp_path / "v.swf", text))
    for f in SWF_FIELDS:
        assert log[f].dtype == plain[f].dtype and log[f].tobytes() == plain[f].tobytes(), f


@pytest.mark.parametrize("token, message", [("-", "not a number"), (".", "not a number"), ("1-2", "not a number"),
                                            ("1.2.3", "not a number"), ("1_000", "not a number"),
                                            ("12345678901234567", "must be a whole number")])
def test_tokens_the_fast_pass_declines_are_judged_line_by_line(tmp_path, token, message):
    bad = f"4 30 0 10 {token} -1 -1 1 60 -1 1 7 1 -1 2 -1 -1 -1"
    text = HEADER + "\n".join(JOBS) + "\n" + bad + "\n"
    if message == "must be a whole number":  # 17 digits: not the fast pass's, but a whole number
        log = read_swf(write(tmp_path / "long.swf", text))
        assert log.allocated_procs[3] == int(float(token))
        return
    with pytest.raises(SwfFormatError, match="line 12") as err:
        read_swf(write(tmp_path / "bad.swf", text))
    assert message in str(err.value)
