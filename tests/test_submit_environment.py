"""A Slurm job's environment is set by the executor, never loaded by a login shell: sbatch runs
in exactly the job's documented environment and passes it whole (``--export=ALL``); with a list
of variables (or ``NONE``) sbatch would set ``SLURM_GET_USER_ENV`` and slurmd would run
``su - ACCOUNT`` for every job. With a fake Slurm (the pattern of tests/test_slurm_gate.py); the
job's environment on a real Slurm is checked in tests/test_slurm_market.py."""

import marketsched.platform.slurm as slurm
from marketsched.platform.executor import CLEAN_PATH, RunAs, job_environment
from test_slurm_gate import FakeSlurm


def test_sbatch_runs_in_the_jobs_environment_and_passes_it_whole(monkeypatch, tmp_path):
    fake = FakeSlurm()
    monkeypatch.setattr(slurm, "run", fake)
    monkeypatch.setenv("MARKETSCHED_TOKEN", "secret-of-the-broker")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm-cluster/slurm.conf")
    ex = slurm.SlurmExecutor(tmp_path / "jobs", slots=4)
    user = RunAs("alice", 4242, 4242, (4242,), "/home/alice")
    for who in (None, user):
        fake.cmds.clear()
        fake.envs.clear()
        ex.launch(1 if who is None else 2, "env", env={"MARKETSCHED_JOB_ID": "7"}, priority_key=1.0, user=who)
        i = next(i for i, a in enumerate(fake.cmds) if a[0] == "sbatch")
        args, env = fake.cmds[i], fake.envs[i]
        exports = [a for a in args if a.startswith("--export")]
        assert exports == ["--export=ALL"] and not any(a.startswith("--get-user-env") for a in args), args
        want = {**job_environment(who, {"MARKETSCHED_JOB_ID": "7"}), "SLURM_CONF": "/etc/slurm-cluster/slurm.conf"}
        assert env == want
        assert env["PATH"] == CLEAN_PATH and "MARKETSCHED_TOKEN" not in env
        if who is not None:
            assert (env["HOME"], env["USER"], env["LOGNAME"], env["SHELL"]) == ("/home/alice", "alice", "alice", "/bin/sh")
            assert [a for a in args if a.startswith("--uid") or a.startswith("--gid")] == ["--uid=4242", "--gid=4242"]
