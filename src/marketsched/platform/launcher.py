"""The job launcher: the small privileged step between the broker and a job's command.

:func:`launcher_argv` builds the command line the local executor
(:class:`marketsched.platform.executor.LocalExecutor`) starts for a job, as a child of the broker,
in a new session, in the job's folder (entered while still privileged, so it works even when the
market's data folder is closed to the job's user), with the job's ``stdout`` / ``stderr`` files
(opened by the broker without following links) as fds 1 and 2 and a pipe as stdin:

1. ``/bin/sh`` (:data:`GO_SCRIPT`, still the broker's account, root in a multi-user market)
   waits for the **go**, one line ``go`` on stdin. Meanwhile the broker moves this process into
   the job's cgroups (writes its pid to each ``cgroup.procs``), pins it to the job's CPUs if
   asked (Tycoon mode), and records its pid and start time in its state file for the job. Only
   then does it send the go: so no code of the job runs before the job is in its cgroups (from
   then on every process it makes is in them; only root can move a process out) and recorded
   (a crash leaves a record). A launcher whose broker died before the go reads end of file and
   exits with :data:`NO_GO` without running anything. The script itself interprets nothing
   from the job: the job's command is in ``command.sh`` and every other value is an argument.
2. ``setpriv`` (util-linux) drops to the job's account: supplementary groups, then gid, then uid
   (real, effective and saved: uid 0 cannot be regained; capabilities are cleared by the
   change of uid). Skipped when the job runs as the broker's own account (single-user mode).
3. ``env -i`` replaces the environment with exactly the job's (never the broker's), and the
   wrapper (``/bin/sh -c WRAPPER``) runs the job's command. The umask is 0077: the job's files
   are private to its user.

Why not Python: an earlier version was a stdlib-only Python file doing the same steps; its
interpreter start-up (about 30 ms a job on the project's loaded 2-core machine) cut the number
of short jobs the market could run per second by about four; ``sh`` + ``setpriv`` + ``env`` cost a
few milliseconds. Exit codes of the launcher itself (before the command runs): :data:`NO_GO`
(111) when the broker went away before the go; ``setpriv`` and ``env`` report their own failures
on the job's stderr (status 1, 126 or 127).
"""

from __future__ import annotations

import shutil

NO_GO = 111
GO_SCRIPT = 'umask 077; IFS= read -r go || exit 111; [ "$go" = go ] || exit 111; exec </dev/null; exec "$@"'
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")


def launcher_argv(argv: list[str], env: dict[str, str], uid: int | None = None, gid: int | None = None,
                  groups=None) -> list[str]:
    """The launcher's command line for a job running ``argv`` with exactly ``env``, as ``uid``
    / ``gid`` / ``groups`` (None: the broker's own account). Raises RuntimeError if a switch of
    account is asked for and ``setpriv`` is missing, ValueError for an environment name that
    ``env`` cannot set."""
    bad = [k for k in env if not k or "=" in k]
    if bad:
        raise ValueError(f"environment variable name(s) {bad} cannot be set")
    tail = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    if uid is not None:
        if SETPRIV is None:
            raise RuntimeError("setpriv (util-linux) is needed to start jobs as their users' accounts")
        gs = ",".join(str(g) for g in (groups or [gid]))
        tail = [SETPRIV, f"--reuid={uid}", f"--regid={gid}", f"--groups={gs}", "--", *tail]
    return ["/bin/sh", "-c", GO_SCRIPT, "marketsched-launcher", *tail]
