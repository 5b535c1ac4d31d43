"""Runs a command through Slurm with the local runner's guarantees: bounded time, per-rank output,
stacks of every rank on every node when it hangs, and no job left behind.

`run_slurm(spec, options, workspace, progress, run_id)` has the shape of `run_process` and returns
a `SlurmRunRecord` (a RunRecord plus the job id, its nodes and each rank's node). A command that
starts with `sbatch` submits that batch script; any other runs as one `srun --label` task per rank
inside an `sbatch --wrap` allocation of nodes x ntasks_per_node, each task seeing RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR (the allocation's first node) and MASTER_PORT
(a port free on that node), so `init_process_group` with env:// runs unchanged. Slurm writes the
job's output into the run's log (the log must be on a file system the nodes share, as a
project folder on a cluster is).

The local child is `slurm_follow.py` (through `run_process`): it submits, follows the job with
squeue and exits with the job's exit code; a SIGTERM to it cancels the job. Alongside it a
watchdog applies the wall and idle timeouts to the job: on a timeout every rank's Python
processes on every node are frozen, then dumped (py-spy, else faulthandler) by `slurm_node.py`
through `srun --overlap --jobid`, and only then is the job cancelled. Every exit path (success,
timeout, a client's cancellation) ends with `scancel` and waits until squeue no longer lists
the job. SLURM_CONF and the rest of the caller's env reach every Slurm command.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from shutil import which
from typing import Literal

import anyio
from pydantic import BaseModel, Field, field_validator
from rootcause.tools.core.context import AMBIENT_PROGRESS, ProgressSink, _no_progress
from rootcause.tools.core.errors import UsageError
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run.command import new_run_id, resolve_program
from rootcause.tools.run.flight_recorder import copy_hook, count_dumps, dump_on_hang
from rootcause.tools.run.process import RunRecord, RunSpec, run_process
from rootcause.tools.run.stacks import ProcessStack, _py_spy

HERE = Path(__file__).resolve().parent
FOLLOW = HERE / "slurm_follow.py"
NODE_SCRIPT = HERE / "slurm_node.py"
CLIENTS = ("sbatch", "srun", "squeue", "scancel", "scontrol")
JOB_PREFIX = "rootcause-"
QUERY_TIMEOUT_S = 20.0
GONE_WITHIN_S = 30.0
_TIME_LIMIT = re.compile(r"^(?:\d{1,7}(?:-\d{1,2})?(?::\d{1,2}){0,2}|UNLIMITED|INFINITE)$")
_NAME = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.,\-]{0,127}$")
_EXTRA = re.compile(r"^(?:--[A-Za-z][A-Za-z0-9\-]*(?:=\S.*)?|-[A-Za-z]\S*)$")
# Options rootcause sets itself (output into the run's log, the job's name, following it) or takes
# from SlurmOptions' fields: giving them in extra_args would break the run or contradict a field.
_RESERVED = {"--output", "-o", "--error", "-e", "--open-mode", "--job-name", "-J", "--parsable", "--wait", "-W",
             "--wrap", "--nodes", "-N", "--ntasks-per-node", "--partition", "-p", "--time", "-t", "--chdir", "-D",
             "--export", "--array", "-a", "--test-only", "--hold", "-H"}
_STATE_OUTCOME: dict[str, Literal["fail", "hang", "crash"]] = {
    "TIMEOUT": "hang", "DEADLINE": "hang", "OUT_OF_MEMORY": "crash", "NODE_FAIL": "crash", "BOOT_FAIL": "crash",
    "PREEMPTED": "crash", "CANCELLED": "crash",
}


class SlurmOptions(BaseModel):
    """Where and how big a Slurm run is: nodes x ntasks_per_node tasks, one per rank."""

    nodes: int = Field(1, ge=1, le=4096, description="Nodes of the allocation (sbatch --nodes).")
    ntasks_per_node: int = Field(1, ge=1, le=1024, description="Tasks (ranks) per node (--ntasks-per-node).")
    partition: str | None = Field(None, description="Slurm partition (--partition); default: the cluster's.")
    time_limit: str | None = Field(
        None, description="Slurm time limit (--time), e.g. '30', '1:00:00', '2-00:00:00'; default: the run's "
                          "timeout_s rounded up to minutes, plus one.")
    extra_args: list[str] = Field(
        default_factory=list, max_length=32,
        description="More sbatch options, each one word: '--mem=8G', '--gres=gpu:8', '--account=proj'.")

    @field_validator("partition")
    @classmethod
    def _partition(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(f"partition {value!r} is not a Slurm partition name (letters, digits, '_.,-', "
                             "not starting with '-')")
        return value

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, value: str | None) -> str | None:
        if value is not None and not _TIME_LIMIT.match(value):
            raise ValueError(f"time_limit {value!r} is not a Slurm time: use minutes, MM:SS, HH:MM:SS, "
                             "D-HH, D-HH:MM or D-HH:MM:SS")
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _EXTRA.match(value) or "\x00" in value:
                raise ValueError(f"extra_args item {value!r} is not one sbatch option word: give '--name=value' "
                                 "or '--flag' (a value as its own word is not accepted)")
            name = value.split("=", 1)[0] if value.startswith("--") else value[:2]
            if name in _RESERVED:
                raise ValueError(f"extra_args item {value!r} sets {name}, which rootcause controls: use the "
                                 "nodes / ntasks_per_node / partition / time_limit fields, or leave it out")
        return values


class SlurmRunRecord(RunRecord):
    launcher: Literal["slurm"] = "slurm"
    job_id: str | None = None
    job_state: str | None = Field(None, description="Slurm's JobState at the end (COMPLETED, FAILED, TIMEOUT...).")
    nodes: list[str] = Field(default_factory=list, description="The allocation's nodes, first = MASTER_ADDR.")
    rank_nodes: dict[str, str] = Field(default_factory=dict, description="Rank -> the node it ran on.")
    timings: dict[str, float] = Field(
        default_factory=dict,
        description="Seconds: submit_to_start, submit_to_first_output, timeout_to_dumps, timeout_to_stacks and "
                    "timeout_to_job_gone (from the timeout's detection; when measured).")


def slurm_env(spec_env: dict[str, str]) -> dict[str, str]:
    """The environment every Slurm client runs with: the server's, then the run's (SLURM_CONF included)."""
    return {**os.environ, **spec_env}


async def _call(argv: list[str], env: dict[str, str], timeout_s: float = QUERY_TIMEOUT_S) -> tuple[int, str]:
    """A Slurm client query (squeue, scontrol, scancel, srun --overlap): output and exit code, bounded."""
    try:
        child = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
    except OSError as exc:
        return 127, str(exc)
    try:
        out, _ = await asyncio.wait_for(child.communicate(), timeout=timeout_s)
    except TimeoutError:
        child.kill()
        await child.wait()
        return 124, f"{argv[0]} did not answer within {timeout_s:.0f} s"
    return child.returncode or 0, out.decode("utf-8", "replace").strip()


async def check_available(env: dict[str, str]) -> None:
    """UsageError naming what is missing: a Slurm client on PATH, or a controller that answers."""
    missing = [name for name in CLIENTS if not which(name, path=env.get("PATH"))]
    if missing:
        raise UsageError(f"launcher='slurm' needs the Slurm clients, and {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not on PATH.",
                         "run rootcause on a login node of the cluster (module load slurm), or use launcher='local'")
    conf = env.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        raise UsageError(f"launcher='slurm': SLURM_CONF={conf} is not a file.",
                         "point SLURM_CONF at the cluster's slurm.conf, or unset it to use the default")
    code, out = await _call(["scontrol", "ping"], env)
    if code != 0 or " is UP" not in out:
        conf = conf or "the default slurm.conf"
        raise UsageError(f"launcher='slurm': the Slurm controller does not answer (scontrol ping, with "
                         f"{conf}): {out[:300] or f'exit {code}'}.",
                         "check that slurmctld runs and SLURM_CONF points at its slurm.conf")


def _default_time_limit(timeout_s: float) -> str:
    # The job ends by itself a minute after rootcause would have cancelled it: a server that dies
    # without running any handler (SIGKILL) still leaves no job running for long.
    return str(math.ceil(timeout_s / 60) + 1)


def _task_script(options: SlurmOptions, ranks_dir: Path) -> str:
    """The batch script of a plain command: torch's env:// variables from Slurm's, one srun task per rank."""
    world = options.nodes * options.ntasks_per_node
    free_port = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    per_task = ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID NODE_RANK=$SLURM_NODEID; '
                f'printf %s "$SLURMD_NODENAME" > "{ranks_dir}/$SLURM_PROCID" 2>/dev/null; exec "$@"')
    return "\n".join([
        "#!/bin/sh",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)',
        'export MASTER_ADDR=${MASTER_ADDR:-$SLURMD_NODENAME}',
        f'export MASTER_PORT=${{MASTER_PORT:-$(python3 -c "{free_port}" 2>/dev/null'
        ' || echo $((20000 + SLURM_JOB_ID % 20000)))}',
        f"export WORLD_SIZE={world} LOCAL_WORLD_SIZE={options.ntasks_per_node}",
        f"exec srun --label --nodes={options.nodes} --ntasks-per-node={options.ntasks_per_node} "
        f"/bin/sh -c {_sh_quote(per_task)} rootcause-task \"$@\"",
    ])


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _sbatch_argv(spec: RunSpec, options: SlurmOptions, run_id: str, folder: Path) -> list[str]:
    log = folder / "log.txt"
    argv = ["sbatch", "--parsable", f"--job-name={JOB_PREFIX}{run_id}", f"--output={log}", f"--error={log}",
            "--open-mode=append", f"--chdir={spec.cwd}", "--export=ALL"]
    user_sbatch = Path(spec.argv[0]).name == "sbatch"
    fields = options.model_fields_set
    if not user_sbatch or "nodes" in fields:
        argv.append(f"--nodes={options.nodes}")
    if not user_sbatch or "ntasks_per_node" in fields:
        argv.append(f"--ntasks-per-node={options.ntasks_per_node}")
    if options.partition:
        argv.append(f"--partition={options.partition}")
    if options.time_limit or not user_sbatch:
        argv.append(f"--time={options.time_limit or _default_time_limit(spec.timeout_s)}")
    argv += options.extra_args
    if user_sbatch:
        for word in spec.argv[1:]:
            name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
            if name in {"--output", "-o", "--error", "-e", "--open-mode", "--job-name", "-J", "--parsable",
                        "--wait", "-W", "--wrap", "--chdir", "-D"}:
                raise UsageError(f"the sbatch command sets {name}, which rootcause controls (the job's output goes "
                                 "to the run's log, its name identifies the run).", f"remove {word!r}")
        return argv + spec.argv[1:]
    ranks_dir = folder / "ranks"
    ranks_dir.mkdir(exist_ok=True)
    script = folder / "job.sh"
    script.write_text(_task_script(options, ranks_dir) + "\n", encoding="utf-8")
    return [*argv, str(script), *spec.argv]


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


async def _hostnames(nodelist: str, env: dict[str, str]) -> list[str]:
    if not nodelist:
        return []
    code, out = await _call(["scontrol", "show", "hostnames", nodelist], env)
    return out.split() if code == 0 else [nodelist]


async def _on_every_node(action: str, job_id: str, node_count: int, env: dict[str, str],
                         py_spy: str = "") -> list[dict]:
    """Run slurm_node.py once per node of the job (srun --overlap); its JSON lines, labels stripped."""
    source = NODE_SCRIPT.read_text(encoding="utf-8")
    argv = ["srun", "--overlap", f"--jobid={job_id}", f"--nodes={node_count}", "--ntasks-per-node=1", "--label",
            "--kill-on-bad-exit=0", f"--job-name={JOB_PREFIX}stacks", "python3", "-c", source, action, job_id,
            py_spy]
    _code, out = await _call(argv, env, timeout_s=60)
    found = []
    for line in out.splitlines():
        _label, _, payload = line.partition(": ")
        if payload.startswith("{"):
            try:
                found.append(json.loads(payload))
            except ValueError:
                continue
    return found


def _faulthandler_text(log_path: Path, since: int, task: int | None) -> str:
    """The lines a task wrote after the timeout (its faulthandler dump), its `N: ` label removed."""
    if task is None:
        return ""
    with open(log_path, "rb") as fh:
        fh.seek(since)
        text = fh.read(2_000_000).decode("utf-8", "replace")
    label = re.compile(rf"^\s*{task}: ?")
    kept = [label.sub("", line, count=1) for line in text.splitlines() if label.match(line)]
    dump = "\n".join(kept)
    return dump if ("File \"" in dump or "most recent call first" in dump) else ""


async def capture_job_stacks(job_id: str, node_count: int, env: dict[str, str], log_path: Path,
                             since: int, py_spy: str | None = None) -> list[ProcessStack]:
    """Every rank's Python stacks on every node: all frozen first, then each dumped (py-spy at the path
    rootcause's own environment has it, else faulthandler; py_spy="" forces faulthandler)."""
    await _on_every_node("freeze", job_id, node_count, env)
    dumped = await _on_every_node("dump", job_id, node_count, env, (_py_spy() or "") if py_spy is None else py_spy)
    if any(d.get("method") == "faulthandler" for d in dumped):
        await asyncio.sleep(1.0)  # slurmstepd forwards the dump into the job's output file
    stacks = []
    for d in dumped:
        text = d.get("text") or ""
        method = d.get("method", "none")
        if method == "faulthandler":
            text = _faulthandler_text(log_path, since, d.get("task"))
            method = "faulthandler" if text else "none"
        stacks.append(ProcessStack(pid=int(d["pid"]), cmdline=str(d.get("cmdline", "")), rank=d.get("rank"),
                                   method=method, text=text, node=d.get("node") or None))
    return sorted(stacks, key=lambda s: (s.rank is None, s.rank or 0, s.pid))


async def cancel_job(job_id: str | None, run_id: str, env: dict[str, str], within_s: float = GONE_WITHIN_S) -> bool:
    """scancel the run's job (by id, and by name for one whose id was not read yet); True once squeue lists
    no job of the run."""
    name = f"{JOB_PREFIX}{run_id}"
    if job_id:
        await _call(["scancel", job_id], env)
    # Without an id the submission may have been cut short while the controller still registers the
    # job: squeue must show no job of the run twice, a second apart, scancel by name before each look.
    empty_looks_needed = 1 if job_id else 2
    deadline = time.monotonic() + within_s
    while True:
        await _call(["scancel", f"--name={name}"], env)
        code, out = await _call(["squeue", "-h", f"--name={name}", "-o", "%i"], env)
        if code == 0 and not out:
            empty_looks_needed -= 1
            if empty_looks_needed <= 0:
                return True
            await asyncio.sleep(1.0)
            continue
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


class _Watch(BaseModel):
    timed_out: Literal["wall", "idle"] | None = None
    timeout_at_byte: int | None = None
    stacks: list[ProcessStack] = Field(default_factory=list)
    first_output: float | None = None
    capture_s: float | None = None
    dumps_s: float | None = None
    gone_after_s: float | None = None


async def _watch(spec: RunSpec, state_path: Path, log_path: Path, env: dict[str, str], run_id: str,
                 progress: ProgressSink, watch: _Watch) -> None:
    """The job's wall and idle timeouts; the idle clock starts when the job runs (queue time is not idle)."""
    started = time.monotonic()
    base = 0
    last_size, last_growth = -1, None
    while True:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        state = _read_state(state_path)
        size = log_path.stat().st_size if log_path.exists() else 0
        if "job_id" in state and not base:
            base = size  # "Submitted batch job N" is ours, not the job's
        if watch.first_output is None and base and size > base:
            watch.first_output = time.time()
        if state.get("started") and last_growth is None:
            last_size, last_growth = size, now
        if size != last_size and last_growth is not None:
            last_size, last_growth = size, now
        if now - started >= spec.timeout_s:
            watch.timed_out = "wall"
        elif spec.idle_timeout_s is not None and last_growth is not None and now - last_growth >= spec.idle_timeout_s:
            watch.timed_out = "idle"
        if not watch.timed_out:
            continue
        watch.timeout_at_byte = size
        job_id = state.get("job_id")
        await progress(now - started, spec.timeout_s,
                       f"{spec.label}: {watch.timed_out} timeout after {now - started:.0f}s, capturing the stacks "
                       f"of job {job_id} on {state.get('nodes', '?')}")
        # Shielded: the follower exits as soon as the job is gone, and the caller then stops this
        # watchdog; the stacks and the cancellation must complete first (both are bounded).
        with anyio.CancelScope(shield=True):
            if job_id and state.get("started"):
                await dump_on_hang(log_path.parent)  # every node's ranks write into the shared run folder
                watch.dumps_s = round(time.monotonic() - now, 3)
                count = int(state.get("node_count") or 1)
                watch.stacks = await capture_job_stacks(job_id, count, env, log_path, size)
            watch.capture_s = round(time.monotonic() - now, 3)
            await cancel_job(job_id, run_id, env)
            watch.gone_after_s = round(time.monotonic() - now, 3)
        return


def _outcome(record: RunRecord, state: dict, watch: _Watch) -> tuple[str, int | None, int | None, str | None]:
    """(outcome, exit_code, signal, timed_out) from the job's end state, not from the follower's exit."""
    job_state = str(state.get("state") or "")
    code, sig = state.get("exit_code"), state.get("exit_signal") or None
    if watch.timed_out:
        return "hang", code, sig, watch.timed_out
    if record.outcome == "hang":  # the follower itself outlived the wall clock (a queue that never started it)
        return "hang", None, None, record.timed_out
    if job_state in _STATE_OUTCOME:
        outcome = _STATE_OUTCOME[job_state]
        if job_state == "OUT_OF_MEMORY":
            sig = sig or 9
        return outcome, code, sig, ("wall" if outcome == "hang" else None)
    if job_state == "COMPLETED" and code == 0 and not sig:
        return "pass", 0, None, None
    if sig:
        return "crash", code, sig, None
    if code is None:
        return record.outcome, record.exit_code, record.signal, None
    return ("pass" if code == 0 else "fail"), code, None, None


def _rank_nodes(folder: Path, stacks: list[ProcessStack]) -> dict[str, str]:
    found: dict[str, str] = {}
    ranks = folder / "ranks"
    if ranks.is_dir():
        for entry in ranks.iterdir():
            if entry.name.isdigit():
                node = entry.read_text(encoding="utf-8", errors="replace").strip()
                if node:
                    found[entry.name] = node
    for stack in stacks:
        if stack.rank is not None and stack.node:
            found.setdefault(str(stack.rank), stack.node)
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


async def run_slurm(spec: RunSpec, options: SlurmOptions, workspace: Workspace, progress: ProgressSink | None = None,
                    run_id: str | None = None) -> SlurmRunRecord:
    """Run one command as a Slurm job to its end or timeout; the record points at the full log on disk."""
    progress = progress or AMBIENT_PROGRESS.get() or _no_progress
    if spec.timeout_s <= 0:
        raise UsageError(f"timeout_s must be > 0, got {spec.timeout_s}.", "give seconds, e.g. timeout_s=900")
    if spec.idle_timeout_s is not None and spec.idle_timeout_s <= 0:
        raise UsageError(f"idle_timeout_s must be > 0, got {spec.idle_timeout_s}.", "omit it or give seconds")
    if spec.argv[:2] == ["/bin/sh", "-c"] and len(spec.argv) > 2 and spec.argv[2].lstrip().startswith("sbatch "):
        raise UsageError("an sbatch command with shell=true would run sbatch inside every task.",
                         "give the sbatch command without shell=true (its script is the shell)")
    env = slurm_env(spec.env)
    await check_available(env)
    if Path(spec.argv[0]).name != "sbatch":
        resolve_program(spec.argv, env, spec.cwd)  # a missing program is the caller's error, not a failed job
    run_id = run_id or new_run_id()
    folder = workspace.state_dir("runs", run_id)
    state_path = folder / "slurm.json"
    log_path = folder / "log.txt"
    sbatch = _sbatch_argv(spec, options, run_id, folder)
    follower = RunSpec(argv=[sys.executable, "-I", str(FOLLOW), str(state_path), "--", *sbatch], cwd=spec.cwd,
                       env={**copy_hook(folder), **spec.env, "SLURM_LABELIO": spec.env.get("SLURM_LABELIO", "1")},
                       timeout_s=spec.timeout_s + 2 * GONE_WITHIN_S, label=spec.label)
    watch = _Watch()
    submitted = time.time()
    job_gone = False
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_watch, spec, state_path, log_path, env, run_id, progress, watch)
            record = await run_process(follower, workspace, progress, run_id)
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            job_gone = await cancel_job(_read_state(state_path).get("job_id"), run_id, env)
    state = _read_state(state_path)
    if state.get("error"):
        raise UsageError(f"sbatch refused the job: {str(state['error'])[:500]}",
                         "check partition, time_limit and extra_args against the cluster's limits (sinfo)")
    outcome, code, sig, timed_out = _outcome(record, state, watch)
    timings: dict[str, float] = {}
    if state.get("started"):
        timings["submit_to_start"] = round(float(state["started"]) - submitted, 3)
    if watch.first_output:
        timings["submit_to_first_output"] = round(watch.first_output - submitted, 3)
    if watch.gone_after_s is not None:
        if watch.dumps_s is not None:
            timings["timeout_to_dumps"] = watch.dumps_s
        timings["timeout_to_stacks"] = watch.capture_s or 0.0
        timings["timeout_to_job_gone"] = watch.gone_after_s
    result = SlurmRunRecord(
        **record.model_dump(exclude={"argv", "outcome", "exit_code", "signal", "timed_out", "timeout_at_byte",
                                     "stacks", "env_overrides", "collective_dumps"}),
        argv=spec.argv, outcome=outcome, exit_code=code, signal=sig, timed_out=timed_out,
        timeout_at_byte=watch.timeout_at_byte, stacks=watch.stacks, env_overrides=spec.env,
        job_id=state.get("job_id"), job_state=state.get("state") if job_gone or state.get("ended") else "UNKNOWN",
        nodes=await _hostnames(str(state.get("nodes") or ""), env), rank_nodes=_rank_nodes(folder, watch.stacks),
        timings=timings, collective_dumps=count_dumps(folder),
    )
    if watch.stacks:
        (folder / "stacks.txt").write_text("\n\n".join(
            f"== rank {s.rank} on {s.node} pid {s.pid} ({s.method}) {s.cmdline}\n{s.text}" for s in watch.stacks),
            encoding="utf-8")
    (folder / "record.json").write_text(result.model_dump_json(exclude={"head", "tail"}), encoding="utf-8")
    return result


__all__ = ["SlurmOptions", "SlurmRunRecord", "cancel_job", "capture_job_stacks", "check_available",
           "run_slurm", "slurm_env"]
