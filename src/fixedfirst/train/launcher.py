"""`fixedfirst train --nproc N`: N training processes on this machine, started the way
`torchrun --standalone` starts them, stopped the way one process stops.

Each process gets torchrun's environment in a session of its own; the launcher passes SIGINT,
SIGTERM and SIGUSR1 on, waits for the checkpoint however long it takes and exits with the
processes' status, where torchrun's agent kills workers 30 seconds after a signal
(docs/guides/distributed.md). A failed process stops the run; one killed from outside cannot
speak for itself, so the launcher says which and how to resume.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from fixedfirst.train.interrupt import INTERRUPT_STATUS, REQUEUE_STATUS, STOP_SIGNALS

WORKER = (sys.executable, "-m", "fixedfirst")
"""The command every process runs, before its arguments (`train ...`)."""

GRACE_S = 15.0
"""How long the other processes may take to stop by themselves after one failed (the same
error on every rank reaches the disk from rank 0 in that time; a peer blocked in a collective
with a dead rank errors within seconds on gloo, but may wait for the NCCL timeout)."""

POLL_S = 0.1

STOPPED = (0, INTERRUPT_STATUS, REQUEUE_STATUS)
"""The statuses of a process that ended on its own terms: finished, or stopped and saved."""


def free_port() -> int:
    """A TCP port free on this machine now, for rank 0's rendezvous store."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_environment(rank: int, nproc: int, port: int) -> dict[str, str]:
    """The environment of process `rank`: what torchrun --standalone sets on one machine."""
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def status_of(returncode: int) -> int:
    """An exit status as a shell reports it: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def launch(nproc: int, arguments: list[str], resume: str) -> int:
    """Run `fixedfirst ARGUMENTS` in `nproc` processes; their exit status (rank 0's when it
    failed or stopped, else the first other failure). `resume` is the command that resumes the
    run, for the line said when a process died without a word."""
    port = free_port()
    processes: list[subprocess.Popen] = []
    received: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in STOP_SIGNALS}
    try:
        for rank in range(nproc):
            processes.append(
                subprocess.Popen(
                    [*WORKER, *arguments],
                    env=worker_environment(rank, nproc, port),
                    start_new_session=True,
                )
            )
        return wait_all(processes, resume, received)
    finally:
        for process in processes:  # this launcher is failing: leave nothing running
            if process.poll() is None:
                process.kill()
                process.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_all(processes: list[subprocess.Popen], resume: str, received: list[int]) -> int:
    """Wait for every process; after the first failure, kill those still running GRACE_S
    seconds later."""
    failed_at: float | None = None
    killed: set[int] = set()
    while True:
        polled = [p.poll() for p in processes]
        if all(code is not None for code in polled):
            break
        if failed_at is None and any(c is not None and c not in STOPPED for c in polled):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_S:
            for rank, process in enumerate(processes):
                if process.poll() is None:
                    process.kill()
                    killed.add(rank)
        time.sleep(POLL_S)
    for rank, process in enumerate(processes):
        signum = -process.returncode
        if signum > 0 and signum not in received and rank not in killed:
            print(
                f"fixedfirst train: error: the process of rank {rank} was killed by "
                f"{signal.Signals(signum).name} (out of memory?); the newest complete checkpoint "
                f"is intact: resume with `{resume}`",
                file=sys.stderr,
                flush=True,
            )
            break
    codes = [status_of(p.returncode) for p in processes]
    if codes[0] != 0:
        return codes[0]
    return next((code for code in codes if code != 0), 0)
