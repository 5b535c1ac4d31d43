"""The flight recorder in every run: the hook on the child's path, its environment, one dump per rank on a hang.

Real runs: torchrun with gloo on CPU, the injected hangs of tests/fixtures/scripts/hangs/ (each states what
its dumps must show), plain Python for what a run that does not use torch.distributed pays (nothing).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from rootcause.tools.core.workspace import Workspace
from rootcause.tools.run import RunSpec, run_process
from rootcause.tools.run.flight_recorder import DUMP_FOLDER, HOOK_DIR, copy_hook, recorder_env

from tests.conftest import FIXTURES

pytestmark = pytest.mark.anyio
PY = sys.executable
HANGS = FIXTURES / "scripts" / "hangs"
needs_torch = pytest.mark.skipif(subprocess.run([PY, "-c", "import torch.distributed"], capture_output=True)
                                 .returncode != 0, reason="torch is not importable in the test interpreter")

READ_DUMPS = """\
import json, pathlib, pickle, sys
out = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob("rank*.pkl")):
    dump = pickle.loads(path.read_bytes())
    out[path.stem[4:]] = [[e["collective_seq_id"], e["profiling_name"].split(":")[-1], e["input_sizes"]]
                          for e in dump["entries"]]
print(json.dumps(out))
"""


def expected(script: str) -> dict:
    """The EXPECTED dict a fault script states (read without running it)."""
    tree = ast.parse((HANGS / script).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "EXPECTED":
            return ast.literal_eval(node.value)
    raise AssertionError(f"{script} states no EXPECTED")


def read_dumps(folder: Path) -> dict[str, list]:
    """Rank -> [seq, op, input sizes] of each entry, unpickled by torch's interpreter (our own dumps)."""
    done = subprocess.run([PY, "-c", READ_DUMPS, str(folder)], capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(done.stdout)


def assert_dumps_as_constructed(folder: Path, want: dict) -> None:
    """One dump per rank; every rank's collectives 1..seq-1 recorded; at seq the op (and sizes) each rank
    entered, and nothing for the ranks that never entered it."""
    dumps = read_dumps(folder)
    world = want.get("nproc") or want["nodes"] * want["ntasks_per_node"]
    assert sorted(dumps, key=int) == [str(r) for r in range(world)], sorted(dumps)
    seq = want["seq"]
    for rank, entries in dumps.items():
        assert [e[0] for e in entries[:seq - 1]] == list(range(1, seq)), (rank, entries)
        at_seq = [e for e in entries if e[0] == seq]
        if int(rank) in want["missing_ranks"]:
            assert not at_seq, (rank, entries)  # never entered the collective
        else:
            assert at_seq and at_seq[0][1] == want.get("ops", {}).get(rank, want["op"]), (rank, entries)
            if "sizes" in want:
                assert at_seq[0][2] == want["sizes"][rank]


def torchrun(script: str, nproc: int) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", script]


def _left(run_id: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("ROOTCAUSE_RUN_ID") == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_recorder_env_prepends_the_hook_and_lets_the_user_win(tmp_path: Path) -> None:
    extra = recorder_env({"PYTHONPATH": "/user/lib"}, tmp_path)
    assert extra["PYTHONPATH"] == f"{HOOK_DIR}:/user/lib"
    assert extra["ROOTCAUSE_FR_DIR"] == str(tmp_path / DUMP_FOLDER)
    assert extra["TORCH_FR_BUFFER_SIZE"] == "2000" and extra["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert extra["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == str(tmp_path / DUMP_FOLDER / "nccl_trace_rank_")
    mine = recorder_env({"TORCH_NCCL_TRACE_BUFFER_SIZE": "50", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/fr_"},
                        tmp_path)
    assert not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} & set(mine)
    assert recorder_env({"ROOTCAUSE_FLIGHT_RECORDER": "0"}, tmp_path) == {}
    copied = copy_hook(tmp_path)  # a Slurm run's copy, in the run folder the nodes share
    assert recorder_env(copied, tmp_path)["PYTHONPATH"] == str(tmp_path / "fr_hook")
    for name in ("sitecustomize.py", "watcher.py"):
        assert (tmp_path / "fr_hook" / name).read_bytes() == (HOOK_DIR / name).read_bytes()


async def test_hook_chains_to_the_users_sitecustomize_and_a_plain_run_pays_nothing(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    probe = ("import os, sys, threading; print(os.environ.get('USER_SITE_RAN'), "
             f"sys.path.index({str(HOOK_DIR)!r}) < sys.path.index({str(lib)!r}), "
             "sys.modules['sitecustomize'].__file__, len(threading.enumerate()))")
    record = await run_process(RunSpec(argv=[PY, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(lib)}),
                               Workspace(tmp_path))
    ran, hook_first, module, threads = record.output.split()
    assert (ran, hook_first, threads) == ("yes", "True", "1"), record.output
    assert module == str(lib / "sitecustomize.py")  # the user's module is `sitecustomize` afterwards, as without us
    assert record.collective_dumps == 0 and not (tmp_path / record.log_path).parent.joinpath(DUMP_FOLDER).exists()


@needs_torch
async def test_the_watcher_starts_only_with_torch_distributed(tmp_path: Path) -> None:
    # `import torch` imports torch.distributed (torch 2.13): every torch process has the one thread.
    probe = ("import threading; a = len(threading.enumerate()); import torch; "
             "print(a, sorted(t.name for t in threading.enumerate() if t.name.startswith('rootcause')))")
    record = await run_process(RunSpec(argv=[PY, "-c", probe], cwd=tmp_path), Workspace(tmp_path))
    assert record.output.strip() == "1 ['rootcause-flight-recorder']", record.output


@needs_torch
@pytest.mark.parametrize("script", ["skip_collective.py", "stalled_loader.py", "mismatched_sizes.py"])
async def test_every_rank_dumps_before_the_kill(tmp_path: Path, script: str) -> None:
    want = expected(script)
    (tmp_path / script).write_text((HANGS / script).read_text())
    notes: list[tuple[float, str]] = []

    async def progress(_done: float, _total: float | None, note: str) -> None:
        notes.append((time.monotonic(), note))

    record = await run_process(RunSpec(argv=torchrun(script, want["nproc"]), cwd=tmp_path, timeout_s=240,
                                       idle_timeout_s=8), Workspace(tmp_path), progress)
    ended = time.monotonic()
    assert record.outcome == "hang" and record.timed_out == "idle", record.output[-3000:]
    assert record.collective_dumps == want["nproc"]
    assert_dumps_as_constructed((tmp_path / record.log_path).parent / DUMP_FOLDER, want)
    # The stacks still come after the dumps: every rank's frame is in them, and none of the hook's.
    assert sum(1 for s in record.stacks if s.rank is not None and s.method != "none") >= want["nproc"]
    assert not [s.pid for s in record.stacks if "fr_hook" in s.text], [s.text for s in record.stacks]
    detected = next(t for t, note in notes if "timeout after" in note)
    assert ended - detected < 15, ended - detected
    assert not _left(record.run_id)


@needs_torch
async def test_a_rank_that_died_is_not_waited_for(tmp_path: Path) -> None:
    """Rank 1 announced a process group, then its process ended: the wait stops at once, not at the deadline."""
    script = tmp_path / "gone.py"
    script.write_text(
        "import os, sys, time, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "time.sleep(0.5)\n"
        "if dist.get_rank() == 1:\n    os._exit(0)\n"
        "while True:\n    time.sleep(0.2)\n")
    record = await run_process(RunSpec(argv=torchrun("gone.py", 2), cwd=tmp_path, timeout_s=120, idle_timeout_s=6),
                               Workspace(tmp_path))
    folder = (tmp_path / record.log_path).parent / DUMP_FOLDER
    names = sorted(p.name for p in folder.iterdir())
    if record.outcome != "hang":  # torchrun saw rank 1's exit first and ended the job: nothing to dump
        pytest.skip(f"torchrun ended the job ({record.outcome}): {names}")
    assert "rank0.pkl" in names and "rank1.pkl" not in names
    trigger = (folder / "trigger").stat().st_mtime
    assert (folder / "rank0.pkl").stat().st_mtime - trigger < 2.0


SPAWNED = """\
import os, time, torch, torch.distributed as dist, torch.multiprocessing as mp


def worker(rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(2))
    print(f"rank {rank} ready", flush=True)
    if rank == 1:
        while True:
            time.sleep(0.2)
    dist.all_reduce(torch.ones(2))


if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
"""


@needs_torch
async def test_mp_spawn_ranks_dump_too(tmp_path: Path) -> None:
    """mp.spawn's children are new interpreters: they load the hook from the inherited PYTHONPATH."""
    import socket

    (tmp_path / "spawned.py").write_text(SPAWNED)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    record = await run_process(RunSpec(argv=[PY, "spawned.py"], cwd=tmp_path, env={"PORT": port}, timeout_s=120,
                                       idle_timeout_s=15), Workspace(tmp_path))  # silent while they import torch
    assert record.outcome == "hang" and record.collective_dumps == 2, record.output[-2000:]
    dumps = read_dumps((tmp_path / record.log_path).parent / DUMP_FOLDER)
    assert [e[:2] for e in dumps["0"]] == [[1, "all_reduce"], [2, "all_reduce"]]
    assert [e[:2] for e in dumps["1"]] == [[1, "all_reduce"]]


def _interpreter(version: str) -> str | None:
    import shutil

    candidates = [shutil.which(f"python{version}"),
                  *map(str, sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python")))]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "pass"], capture_output=True).returncode == 0:
            return python
    return None


@pytest.mark.parametrize("version", ["2.7", "3.6", "3.8", "3.13"])
async def test_other_interpreters_run_the_users_sitecustomize_and_print_nothing(tmp_path: Path, version: str) -> None:
    """The hook runs in whatever interpreter the command names: older ones parse it and chain (Python 2 only
    parses it: it has no find_spec finders, so the hook stands aside there and the user's own file does not run)."""
    python = _interpreter(version)
    if not python:
        pytest.skip(f"no python{version} here (PATH, pyenv)")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    record = await run_process(RunSpec(argv=[python, "-c", "import os, json; print(os.environ.get('USER_SITE_RAN'))"],
                                       cwd=tmp_path, env={"PYTHONPATH": str(lib)}), Workspace(tmp_path))
    assert record.outcome == "pass", record.output
    assert record.output.strip() == ("None" if version == "2.7" else "yes"), record.output
