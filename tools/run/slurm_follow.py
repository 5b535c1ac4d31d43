"""Submits one Slurm batch job and follows it to its end: the local child of a Slurm run.

Run as a script by tools/runner/slurm.py through the one runner (`python -I slurm_follow.py
STATE_FILE -- sbatch ARGS...`), so a Slurm run has a local process whose life is the job's: the
runner's timeouts, progress and teardown apply to it unchanged. It imports nothing of rootcause
(a folder named `tools` in the user's project cannot shadow it).

- Submits with `sbatch --parsable`, prints Slurm's own "Submitted batch job N" line to the log.
- Writes STATE_FILE (JSON, replaced atomically) on every change the server needs: job id,
  state, node list, start time, and at the end JobState and ExitCode from `scontrol show job`
  (no accounting is assumed: squeue while the job is known, scontrol afterwards).
- Exits with the job's exit code. On SIGTERM, SIGINT or SIGHUP it cancels the job (scancel),
  waits until squeue no longer lists it, and exits 143.
- A follower killed without a chance to act (SIGKILL: the runner's exit path and its guardian kill
  a run's group that way) must still end the job: right after submitting it starts a canceller
  (`slurm_follow.py --cancel-on-eof JOB_ID`, its own session, without the run marker) that holds
  the read end of a pipe only the follower writes to. End of file without "done" means the
  follower died: the canceller cancels the job. A follower that saw the job end writes "done".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
                 "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"}
QUERY_TIMEOUT_S = 30
GONE_WITHIN_S = 60
RUN_MARKER = "ROOTCAUSE_RUN_ID"


class State:
    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, object] = {}

    def update(self, **fields: object) -> None:
        if all(self.data.get(k) == v for k, v in fields.items()):
            return
        self.data.update(fields)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)


def query(argv: list[str]) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=QUERY_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def squeue(job_id: str) -> tuple[str, str, str] | None:
    """(state, node list, node count) while squeue lists the job; None once it does not."""
    code, out = query(["squeue", "-h", "-j", job_id, "-o", "%T|%N|%D"])
    if code != 0 or not out:
        return None
    state, _, rest = out.splitlines()[0].partition("|")
    nodes, _, count = rest.partition("|")
    return state.strip(), nodes.strip(), count.strip()


def final_facts(job_id: str) -> dict[str, object]:
    """JobState, ExitCode (code and signal) and NodeList from `scontrol show job` (kept ~MinJobAge)."""
    code, out = query(["scontrol", "show", "job", "-o", job_id])
    facts: dict[str, object] = {}
    if code != 0:
        return facts
    for word in out.split():
        key, _, value = word.partition("=")
        if key == "JobState":
            facts["state"] = value
        elif key == "ExitCode" and ":" in value:
            exit_code, _, sig = value.partition(":")
            facts["exit_code"], facts["exit_signal"] = int(exit_code or 0), int(sig or 0)
        elif key == "NodeList" and value not in ("", "(null)"):
            facts["nodes"] = value
        elif key == "Reason":
            facts["reason"] = value
    return facts


def wait_gone(job_id: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if squeue(job_id) is None:
            return True
        time.sleep(0.2)
    return False


def start_canceller(job_id: str):
    """The canceller of this job, and the write end of its pipe (see the module's docstring)."""
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != RUN_MARKER}
    try:
        subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), "--cancel-on-eof", job_id],
                         stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         start_new_session=True)
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return os.fdopen(write_end, "w")


def cancel_on_eof(job_id: str) -> int:
    if "done" in sys.stdin.read():
        return 0
    query(["scancel", job_id])
    wait_gone(job_id, GONE_WITHIN_S)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--cancel-on-eof":
        return cancel_on_eof(argv[1])
    if len(argv) < 3 or argv[1] != "--":
        print("usage: slurm_follow.py STATE_FILE -- sbatch ARGS...", file=sys.stderr)
        return 2
    state = State(argv[0])
    sbatch = argv[2:]
    job_id: list[str] = []
    canceller = []

    def done() -> None:
        for pipe in canceller:
            try:
                pipe.write("done\n")
                pipe.close()
            except OSError:
                pass

    def cancel(signum: int, _frame: object) -> None:
        if job_id:
            query(["scancel", job_id[0]])
            gone = wait_gone(job_id[0], GONE_WITHIN_S)
            state.update(cancelled_by="rootcause", gone=gone, **final_facts(job_id[0]))
            if gone:
                done()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, cancel)
    # The job must not carry the local run marker: its processes are Slurm's to end (scancel), never
    # the local reaper's, exactly as on a cluster where they run on other hosts.
    os.environ.pop(RUN_MARKER, None)
    submitted = time.time()
    code, out = query(sbatch)
    if code != 0:
        state.update(error=out or f"sbatch exited {code}")
        print(out, flush=True)
        return 2
    job_id.append(out.splitlines()[-1].split(";")[0].strip())
    pipe = start_canceller(job_id[0])
    if pipe is not None:
        canceller.append(pipe)
    state.update(job_id=job_id[0], submitted=submitted, state="PENDING")
    print(f"Submitted batch job {job_id[0]}", flush=True)
    interval = 0.1
    while True:
        seen = squeue(job_id[0])
        if seen is None:
            break
        status, nodes, count = seen
        if status not in ACTIVE_STATES:
            break
        if status == "RUNNING" and "started" not in state.data:
            state.update(started=time.time())
        state.update(state=status, nodes=nodes, node_count=count)
        time.sleep(interval)
        interval = min(1.0, interval * 1.25)
    state.update(ended=time.time(), **final_facts(job_id[0]))
    done()
    exit_code = state.data.get("exit_code")
    exit_signal = state.data.get("exit_signal")
    if isinstance(exit_signal, int) and exit_signal:
        return 128 + exit_signal
    return exit_code if isinstance(exit_code, int) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
