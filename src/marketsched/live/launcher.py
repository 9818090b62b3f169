"""The job launcher: the small privileged step between the broker and a job's command.

The local executor (:class:`marketsched.live.executor.LocalExecutor`) starts this file with
``python -I -S`` (isolated: no environment variables, no user site, no ``site`` import; only the
standard library is used) as a child of the broker, in a new session, with the job's folder as
its working directory (entered while still privileged, so it works even when the market's data
folder is closed to the job's user), the job's ``stdout`` / ``stderr`` files as its fds 1 and 2
(opened by the broker without following links), and a pipe as its stdin. It then:

1. reads the **job spec** (one JSON document) from stdin up to end of file. The broker writes it
   only after it has recorded the launcher's pid and start time in its state file for the job,
   so a job's command never runs unrecorded: if the broker dies before that, the launcher reads
   an empty stdin and exits with :data:`NO_GO` without running anything;
2. moves itself into the job's cgroups (writes its pid to each ``cgroup.procs`` named in the
   spec) while it is still root: from then on every process the job makes is in them (only
   root can move a process out), whatever it does with sessions and forks;
3. pins itself to the spec's CPUs, if any (Tycoon mode's hosts);
4. drops privileges to the job's user: supplementary groups, then gid, then uid (real,
   effective and saved), and checks that uid 0 cannot be regained;
5. sets the umask (0077: the job's files are private to its user) and ``exec``\\ s the command
   with the spec's environment, and nothing else (not the broker's).

Exit codes of the launcher itself (before the command runs): :data:`NO_GO` (111) when the
broker went away before the go, :data:`FAILED` (125) for any other failure, with a message on
the job's stderr. Kept a separate file with no import from the package, so the privileged code
is small enough to read in one sitting.
"""

import json
import os
import sys

NO_GO = 111
FAILED = 125


def fail(msg: str) -> None:
    try:
        os.write(2, f"marketsched launcher: {msg}\n".encode())
    finally:
        os._exit(FAILED)


def drop_privileges(uid: int, gid: int, groups: list[int]) -> None:
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        fail(f"could not switch to uid {uid} gid {gid}")
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            return
        fail("uid 0 could be regained after dropping privileges")


def main() -> None:
    data = b""
    while True:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
    if not data.strip():
        os._exit(NO_GO)
    try:
        spec = json.loads(data)
        argv = [str(a) for a in spec["argv"]]
        env = {str(k): str(v) for k, v in spec["env"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        fail(f"bad job spec: {exc!r}")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    pid = str(os.getpid()).encode()
    for procs in spec.get("cgroups") or []:
        try:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        except OSError as exc:
            fail(f"cannot join cgroup {procs}: {exc.strerror}")
    if spec.get("affinity"):
        try:
            os.sched_setaffinity(0, [int(c) for c in spec["affinity"]])
        except OSError as exc:
            fail(f"cannot pin to CPUs {spec['affinity']}: {exc.strerror}")
    if spec.get("uid") is not None:
        try:
            drop_privileges(int(spec["uid"]), int(spec["gid"]), [int(g) for g in spec.get("groups") or []])
        except OSError as exc:
            fail(f"cannot switch to uid {spec['uid']}: {exc.strerror}")
    os.umask(int(spec.get("umask", 0o077)))
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        fail(f"cannot run {argv[0]}: {exc.strerror}")


if __name__ == "__main__":
    sys.exit(main())
