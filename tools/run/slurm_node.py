"""Runs on every node of a hung Slurm job (one `srun --overlap` task per node): its ranks' stacks.

`python3 -c <this file's text> ACTION JOB_ID [PY_SPY]`; stdlib only, since it runs in whatever
Python the node has. A rank's processes are found through /proc/PID/environ (SLURM_JOB_ID, and
SLURMD_NODENAME for this node: on a cluster simulated on one host every node sees every process),
never through the job's process tree, which a node cannot see across. One JSON line per process.

- freeze: SIGSTOP every Python process of the job on this node (not this step's own), so that no
  rank leaves its collective while a peer is being dumped.
- dump: `py-spy dump --nonblocking` of each; where py-spy is missing or refused, SIGABRT +
  SIGCONT so PYTHONFAULTHANDLER writes the stacks to the job's output (method "faulthandler").
"""

import json
import os
import signal
import subprocess
import sys


def environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [w.decode("utf-8", "replace") for w in fh.read().split(b"\0") if w]
    except OSError:
        return []


def is_python(pid: int, argv: list[str]) -> bool:
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    first = os.path.basename(argv[0]) if argv else ""
    return "python" in exe or "python" in first


def job_pythons(job_id: str) -> list[tuple[int, dict[str, str], list[str]]]:
    node = os.environ.get("SLURMD_NODENAME", "")
    own_step = os.environ.get("SLURM_STEP_ID")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        env = environ(pid)
        if env.get("SLURM_JOB_ID") != job_id or env.get("SLURMD_NODENAME", node) != node:
            continue
        if own_step is not None and env.get("SLURM_STEP_ID") == own_step:
            continue
        argv = cmdline(pid)
        if is_python(pid, argv):
            found.append((pid, env, argv))
    return found


def describe(pid: int, env: dict[str, str], argv: list[str]) -> dict[str, object]:
    rank = env.get("RANK") or env.get("SLURM_PROCID")
    procid = env.get("SLURM_PROCID")
    return {"node": os.environ.get("SLURMD_NODENAME", ""), "pid": pid, "cmdline": " ".join(argv)[:300],
            "rank": int(rank) if rank and rank.isdigit() else None,
            "task": int(procid) if procid and procid.isdigit() else None}


def py_spy_dump(py_spy: str, pid: int) -> str | None:
    if not py_spy or not os.access(py_spy, os.X_OK):
        return None
    try:
        done = subprocess.run([py_spy, "dump", "--nonblocking", "--pid", str(pid)], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def main(argv: list[str]) -> int:
    action, job_id = argv[0], argv[1]
    py_spy = argv[2] if len(argv) > 2 else ""
    for pid, env, args in job_pythons(job_id):
        info = describe(pid, env, args)
        try:
            if action == "freeze":
                os.kill(pid, signal.SIGSTOP)
                info.update(method="none", text="")
            else:
                text = py_spy_dump(py_spy, pid)
                if text is None:
                    os.kill(pid, signal.SIGABRT)
                    os.kill(pid, signal.SIGCONT)
                    info.update(method="faulthandler", text="")
                else:
                    info.update(method="py-spy", text=text[:8000])
        except ProcessLookupError:
            continue
        print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
