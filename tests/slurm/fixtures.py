"""The real two-node Slurm cluster of tests/slurm/cluster.sh as pytest fixtures, and what tests check on it.

`slurm_cluster` (session scope) uses a cluster that already answers (`.ci/run` starts one) or starts
one, and stops only what it started. It skips only when the cluster cannot be started, with the
script's reason. It yields the cluster's SLURM_CONF and puts it into os.environ, so `rootcause
serve` started by a test (which inherits the environment) talks to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

CLUSTER = Path(__file__).with_name("cluster.sh")
NODES = ("n1", "n2")


def _cluster(action: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CLUSTER), action], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def _conf_from(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("SLURM_CONF="):
            return line.partition("=")[2].strip()
    return str(Path(os.environ.get("RC_SLURM_DIR", "/tmp/rootcause-slurm")) / "slurm.conf")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[str]:
    started = False
    if _cluster("status").returncode != 0:
        if not shutil.which("slurmctld") or not shutil.which("munged"):
            pytest.skip("the Slurm test cluster cannot be started: slurm-wlm and munge are not installed "
                        "(as root: tests/slurm/cluster.sh install)")
        if os.geteuid() != 0:
            pytest.skip("the Slurm test cluster cannot be started: tests/slurm/cluster.sh start needs root")
        done = _cluster("start")
        if done.returncode != 0:
            pytest.skip(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                        else f"tests/slurm/cluster.sh start exited {done.returncode}")
        started = True
        conf = _conf_from(done.stdout)
    else:
        conf = _conf_from(_cluster("start").stdout)  # start on a running cluster only prints SLURM_CONF
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        if started:
            _cluster("stop")


def squeue_jobs(conf: str, name_part: str = "rootcause-") -> list[str]:
    """Jobs squeue lists whose name contains name_part ("id name state" each)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, check=False,
                         env={**os.environ, "SLURM_CONF": conf}, timeout=30).stdout
    return [line for line in out.splitlines() if name_part in line]


def jobs_of_repo(conf: str, repo: Path) -> list[str]:
    """Jobs squeue lists for the runs of one repository (other test sessions may share the cluster)."""
    runs = repo / ".rootcause" / "runs"
    names = {f"rootcause-{p.name}" for p in runs.iterdir()} if runs.is_dir() else set()
    return [job for job in squeue_jobs(conf) if job.split()[1] in names]


def job_processes(job_id: str) -> list[str]:
    """Live processes of a Slurm job on any node of this machine (by SLURM_JOB_ID in their environment)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if env.get("SLURM_JOB_ID") == str(job_id):
            found.append(f"{proc.info['pid']} {env.get('SLURMD_NODENAME')} {proc.info['cmdline']}")
    return found


def wait_nothing_left(conf: str, job_id: str | None, within_s: float = 15.0) -> tuple[list[str], list[str]]:
    """(jobs squeue still lists for rootcause runs, processes of the job) after waiting up to within_s."""
    deadline = time.monotonic() + within_s
    while True:
        jobs = [j for j in squeue_jobs(conf) if job_id is None or j.split()[0] == str(job_id)]
        procs = job_processes(job_id) if job_id else []
        if (not jobs and not procs) or time.monotonic() > deadline:
            return jobs, procs
        time.sleep(0.2)
