"""Result files carry their provenance: write, read back, re-run from the metadata alone."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from marketsched.cli import main
from marketsched.engine.events import replay
from marketsched.results import read, rerun, version
from marketsched.scenario import Scenario

SMALL = ["--synthetic-jobs", "200", "--synthetic-nodes", "8"]


def test_simulate_out_round_trip(tmp_path):
    out = tmp_path / "hb.parquet"
    r = CliRunner().invoke(main, ["simulate", *SMALL, "--seed", "4", "--mechanism", "hb", "--param", "pricing=first",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    table, meta = read(out)
    assert meta["marketsched"] == version() and meta["command"] == "simulate"
    assert meta["runs"] == [{"label": "hb/first", "mechanism": "hb", "params": {"pricing": "first"},
                             "engine": meta["engine"]}]  # HB has a kernel: the process's engine path
    sc = meta["scenario"]
    assert sc["seed"] == 4 and sc["values"] == "bimodal-1" and sc["deadlines"] == "patience" and sc["bids"] == "truthful"
    assert sc["workload"]["trace"] is None and sc["workload"]["synthetic_jobs"] == 200
    assert not table.duplicated(["run", "job_id", "copy"]).any()
    again = rerun(meta)
    pd.testing.assert_frame_equal(again, table)


def test_compare_out_and_events_round_trip(tmp_path):
    out, ev = tmp_path / "all.parquet", tmp_path / "events.parquet"
    r = CliRunner().invoke(main, ["compare", *SMALL, "--mechanisms", "hb,dlgm,ees,egg,fcfs", "--pricings", "kth,first",
                                  "--param", "ees.n_draws=10", "--reliability", "mix", "--out", str(out),
                                  "--events", str(ev), "--no-legend"])
    assert r.exit_code == 0, r.output
    table, meta = read(out)
    labels = ["hb/kth", "hb/first", "dlgm", "ees(n_draws=10)", "egg", "fcfs"]
    assert [x["label"] for x in meta["runs"]] == labels
    assert table["run"].unique().tolist() == labels
    assert not table.duplicated(["run", "job_id", "copy"]).any()
    assert meta["scenario"]["reliability"] == "mix"
    pd.testing.assert_frame_equal(rerun(meta), table)
    # the event log replays to the same outcome as the table, run by run
    events, emeta = read(ev)
    assert emeta == meta
    for label, part in table.groupby("run", sort=False):
        rec = replay(events[events.run == label], len(part))
        np.testing.assert_array_equal(rec.payment, part["payment"].to_numpy())
        np.testing.assert_array_equal(rec.preemptions, part["preemptions"].to_numpy())
        assert (pd.Series(rec.state).map({1: "completed", 2: "rejected", 3: "discarded", 4: "killed"}).to_numpy()
                == part["state"].astype(str).to_numpy()).all()


def test_csv_keeps_metadata_beside_it(tmp_path):
    out = tmp_path / "easy.csv"
    r = CliRunner().invoke(main, ["simulate", *SMALL, "--mechanism", "easy", "--estimates", "badness:f=2",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    table, meta = read(out)
    assert json.loads((tmp_path / "easy.csv.meta.json").read_text()) == meta
    assert meta["scenario"]["workload"]["estimates"] == "badness:f=2"
    again = rerun(meta)
    again.to_csv(tmp_path / "again.csv", index=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again.csv"), table)


def test_unreadable_files_say_why(tmp_path):
    plain = tmp_path / "plain.parquet"
    pd.DataFrame({"a": [1]}).to_parquet(plain)
    with pytest.raises(ValueError, match="no marketsched metadata"):
        read(plain)
    with pytest.raises(ValueError, match="metadata file plain.csv.meta.json is missing"):
        pd.DataFrame({"a": [1]}).to_csv(tmp_path / "plain.csv")
        read(tmp_path / "plain.csv")
    r = CliRunner().invoke(main, ["compare", *SMALL, "--events", str(tmp_path / "e.txt")])
    assert r.exit_code != 0 and ".parquet or .csv" in r.output


@pytest.mark.trace
def test_trace_provenance_and_split_keys(tmp_path, trace_path):
    path = trace_path("KTH-SP2-1996-2.1-cln")
    out = tmp_path / "kth.parquet"
    r = CliRunner().invoke(main, ["simulate", "--trace", str(path), "--jobs", "40", "--split", "--capacity", "0.5",
                                  "--mechanism", "wsept", "--out", str(out)])
    assert r.exit_code == 0, r.output
    table, meta = read(out)
    w = meta["scenario"]["workload"]
    assert w["trace_file"] == path.name and len(w["trace_sha256"]) == 64 and w["split"] and w["jobs"] == 40
    assert table["copy"].max() > 0 and table["job_id"].duplicated().any()  # split copies share job ids
    assert not table.duplicated(["job_id", "copy"]).any()  # ... but not the key
    pd.testing.assert_frame_equal(rerun(meta), table)
    bad = json.loads(json.dumps(meta))
    bad["scenario"]["workload"]["trace_sha256"] = "0" * 64
    with pytest.raises(ValueError, match="the results were made from 0000"):
        Scenario.from_dict(bad["scenario"])
