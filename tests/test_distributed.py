"""Two processes on CPU with gloo, launched the way users launch them (torchrun, --nproc).

What must hold (docs/design.md §8):
- a 2-process run computes what a 1-process run with the same global batch computes, up to the
  rounding of summing gradients in another order (TOLERANCE below);
- every rank trains at the same depth each step (the trainer checks this at every log line, and
  the runs below log every step, with varying depths and truncated backprop);
- checkpoints hold full state: a 2-process checkpoint resumes on 1 process, under DDP and FSDP2;
- SIGUSR1 (or SIGTERM) to `--nproc 2` stops both ranks at the same step with one checkpoint,
  exit status 75 and no traceback, and a resume on two processes reproduces the run exactly;
  Ctrl-C reaches each process once through the launcher, which exits with status 130;
- a killed rank stops the whole run without leaving a half-written checkpoint, and the newest
  checkpoint resumes to the end of the uninterrupted run.

Every process started costs seconds of CPU before its first step (torch and its compiler's
modules), so the runs share launches: the reference 2-process run decides an automatic switch
(the auto-switch test), and the SIGUSR1'd run's resume on two processes is the run whose rank is
killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixedfirst.compute.plan import plan_run
from fixedfirst.runs.checkpoint import CheckpointManager
from fixedfirst.schedules import Schedule
from fixedfirst.train.metrics import read_metrics
from fixedfirst.train.trainer import Trainer
from tests.test_crash import resume_here
from tests.trainer_helpers import comparable, final_weights, train_records, write_tiny_config

ROOT = Path(__file__).resolve().parents[1]

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
"""1 vs 2 processes: the same arithmetic except the order in which micro-batch gradients are
summed (one process accumulates four micro-batches in turn; two processes accumulate two each and
all-reduce). Measured on this CPU over the 24 steps below, DDP and FSDP2 alike: loss at most
1.0e-7 relative (one float32 rounding; about half the steps bit-identical), final weights at most
1.8e-7 absolute. 1e-5 leaves room for other BLAS builds while still failing on any real
difference (a wrong row, seed or gradient scale moves the loss in the second decimal)."""

# 24 steps of 8 sequences; 2 micro-batches of 2 rows per rank (4 in one process) exercise
# no_sync/set_requires_gradient_sync; the finish stage draws depths 1..6 with gradients through
# the last 2 iterations only, so DDP meets varying depths and truncated backprop.
SETTINGS = [
    "train.tokens=3072",
    "train.micro_batch_size=2",
    "train.grad_depth=2",
    "train.checkpoint_every=4",
]

AUTO_SWITCH = [
    "schedule.switch=auto",
    "switch.rule=depth-gap",
    "switch.every=2",
    "switch.window=0.5",
    "switch.threshold=0.05",
    "train.keep_checkpoints=6",
]
"""The reference runs' own settings: a switch decided by depth-gap probes on both ranks (rank 0's
numbers broadcast), at step 12 here (the window's floor: the bound, about 0.015, is far below
the threshold), and every checkpoint kept (changes no weight or metric), which the resumed runs
are held to bit for bit."""
AUTO_ARGS = [a for s in AUTO_SWITCH for a in ("--set", s)]

# Each step of this runner sleeps a little, so that a kill lands mid-run on this fast tiny model.
SLOW_STEPS = """
import sys, time
from fixedfirst.train import trainer
original = trainer.Trainer._step
def slow(self, *args):
    time.sleep(0.15)
    return original(self, *args)
trainer.Trainer._step = slow
from fixedfirst.cli.main import main
main(sys.argv[1:])
"""


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT),
        "OMP_NUM_THREADS": "1",
        "FIXEDFIRST_DIST_TIMEOUT": "60",
    }


def torchrun(script: list[str], args: list[str], nproc: int = 2) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", str(nproc), *script, *args]
    return subprocess.Popen(
        command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 240) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def train_args(config: Path, run: Path, *extra: str) -> list[str]:
    settings = [a for s in SETTINGS for a in ("--set", s)]
    return ["train", str(config), "--out", str(run), "--quiet", *settings, *extra]


def in_process_config(config: Path, *extra: str):
    from fixedfirst.config import load_config

    return load_config(config, [*SETTINGS, *extra])


def assert_close_runs(a: Path, b: Path) -> None:
    ra, rb = train_records(a), train_records(b)
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    assert [r["depth"] for r in ra] == [r["depth"] for r in rb]
    # The loss and the gradient norm before clipping (the gradient of the mean over the global
    # batch: a scale error in how ranks or micro-batches are combined changes it however the
    # clipped, Adam-normalised updates hide it).
    for key in ("loss", "grad_norm"):
        torch.testing.assert_close(
            torch.tensor([r[key] for r in ra], dtype=torch.float64),
            torch.tensor([r[key] for r in rb], dtype=torch.float64),
            **TOLERANCE,
        )
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], **TOLERANCE)


def switch_lines(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r["kind"].startswith("switch")]


def assert_same_switch(a: Path, b: Path) -> None:
    """The same probes at the same steps (gains up to TOLERANCE) and the same switch step."""
    la, lb = switch_lines(a), switch_lines(b)
    assert [(r["kind"], r["step"]) for r in la] == [(r["kind"], r["step"]) for r in lb]
    assert [r["kind"] for r in la].count("switch") == 1
    gains = [[r["gain"] for r in lines if r["kind"] == "switch_probe"] for lines in (la, lb)]
    torch.testing.assert_close(*(torch.tensor(g, dtype=torch.float64) for g in gains), **TOLERANCE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A 1-process reference run and the same run on 2 DDP processes (started with --nproc),
    each deciding its switch (AUTO_SWITCH)."""
    root = tmp_path_factory.mktemp("runs")
    config = write_tiny_config(root)
    ddp = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fixedfirst",
            *train_args(config, root / "ddp", *AUTO_ARGS, "--nproc", "2"),
        ],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    Trainer(in_process_config(config, *AUTO_SWITCH), root / "single", quiet=True).train()
    finish(ddp)
    return {"config": config, "single": root / "single", "ddp": root / "ddp"}


def test_two_ddp_processes_equal_one_process(runs):
    """The same losses, gradients and weights up to TOLERANCE, and the same switch decision
    from the probes (rank 0's broadcast): the run is the fixed-switch run at the step chosen."""
    assert_close_runs(runs["single"], runs["ddp"])
    assert_same_switch(runs["single"], runs["ddp"])
    config = in_process_config(runs["config"], *AUTO_SWITCH)
    total = plan_run(config).total_steps
    (decided,) = [r["step"] for r in switch_lines(runs["ddp"]) if r["kind"] == "switch"]
    fixed = in_process_config(runs["config"], f"schedule.switch={decided / total!r}")
    depths = [r["depth"] for r in train_records(runs["ddp"])]
    assert depths == Schedule(fixed.schedule, fixed.train.seed).depths(total)
    assert len(set(depths)) > 2 and max(depths) > config.train.grad_depth
    meta = CheckpointManager(runs["ddp"] / "checkpoints").all()[-1].meta
    assert meta["world_size"] == 2


def test_fsdp_resumes_a_one_process_checkpoint_and_one_process_resumes_its(tmp_path):
    """1 process to step 10, FSDP2 on 2 processes to step 18 (evaluating on the way), 1 process
    to the end: the same run as 1 process throughout. Tied embeddings check that a tensor with
    two names is saved once and restored to both."""
    config = write_tiny_config(tmp_path)
    extra = ("model.tie_embeddings=true", "eval.every=6")
    run, reference = tmp_path / "run", tmp_path / "reference"
    Trainer(in_process_config(config, *extra), run, quiet=True).train(stop_after=10)
    fsdp = ["--set", "train.strategy=fsdp", "--stop-after", "18"]
    proc = torchrun(["-m", "fixedfirst"], ["train", "--out", str(run), "--resume", *fsdp])
    Trainer(in_process_config(config, *extra), reference, quiet=True).train()
    out = finish(proc)
    assert "resume: continuing from step-0000010 (step 10)" in out
    meta = CheckpointManager(run / "checkpoints").all()[-1].meta
    assert (meta["step"], meta["world_size"]) == (18, 2)
    Trainer(in_process_config(config, *extra), run, resume=True, quiet=True).train()
    assert_close_runs(reference, run)
    evals = [read_metrics(r / "metrics.jsonl", "eval") for r in (reference, run)]
    assert [e["step"] for e in evals[0]] == [e["step"] for e in evals[1]] == [6, 12, 18, 24]
    for a, b in zip(*evals, strict=True):
        for depth, nll in a["nll_by_depth"].items():
            assert b["nll_by_depth"][depth] == pytest.approx(nll, rel=TOLERANCE["rtol"])


# `fixedfirst train --nproc 2` whose processes run SLOW_STEPS (argv[1]) instead of the package.
SLOW_LAUNCHER = """
import sys
from fixedfirst.train import launcher
launcher.WORKER = (sys.executable, sys.argv[1])
from fixedfirst.cli.main import main
main(sys.argv[2:])
"""


def launch_slow(tmp_path: Path, args: list[str]) -> subprocess.Popen:
    script = tmp_path / "slow_train.py"
    script.write_text(SLOW_STEPS)
    command = [sys.executable, "-c", SLOW_LAUNCHER, str(script), *args, "--nproc", "2"]
    return subprocess.Popen(
        command, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_step(proc: subprocess.Popen, run: Path, step: int) -> None:
    meta = run / "checkpoints" / f"step-{step:07d}" / "meta.json"
    deadline = time.monotonic() + 180
    while not meta.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.02)


def weights_at(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"step-{step:07d}" / "model.safetensors")


@dataclass(frozen=True)
class Stopped:
    """A launch of `--nproc 2` that was stopped, and what it said."""

    run: Path
    status: int
    out: str


@pytest.fixture(scope="module")
def preempted(runs, tmp_path_factory) -> Stopped:
    """What `sbatch --signal=USR1@T` does ahead of a time limit: SIGUSR1 to the reference DDP
    run launched again (slow steps), once its step-4 checkpoint is written. The resume test
    below continues it."""
    root = tmp_path_factory.mktemp("preempted")
    run = root / "run"
    proc = launch_slow(root, train_args(runs["config"], run, *AUTO_ARGS))
    wait_for_step(proc, run, 4)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=120)
    return Stopped(run, proc.returncode, out)


def test_sigusr1_stops_every_process_with_a_checkpoint(preempted):
    """The ranks stop at the same step, the checkpoint holds the whole run, one line says how to
    resume, and the status asks for a requeue."""
    run, out = preempted.run, preempted.out
    assert preempted.status == 75, out
    assert "Traceback" not in out
    said = [line for line in out.splitlines() if line.startswith("fixedfirst")]
    assert len(said) == 1, out  # rank 0 speaks for both
    assert said[0].startswith("fixedfirst train: stopped by SIGUSR1: saved step-")
    assert said[0].endswith(f"; resume with `fixedfirst train --resume --out {run} --nproc 2`")
    saved = CheckpointManager(run / "checkpoints").all()[-1]
    assert saved.tags == ["paused"] and 4 < saved.step < 24 and saved.meta["world_size"] == 2


def test_a_resume_on_two_processes_is_exact_and_a_killed_rank_stops_it(runs, preempted, tmp_path):
    """The SIGUSR1'd run resumed on two processes (slow steps again) continues the reference
    run bit for bit until rank 1 is killed after its next checkpoint; the whole run then stops
    with one line, no checkpoint half-written, and the newest resumes on one process to the end
    of the uninterrupted run, up to the order of summing gradients."""
    run = preempted.run
    assert preempted.status == 75, preempted.out
    paused = CheckpointManager(run / "checkpoints").all()[-1].step
    reached = (paused // 4 + 1) * 4  # the resumed run's first checkpoint of its own
    assert reached < 24, f"paused at step {paused}: too late to resume and kill"
    proc = launch_slow(tmp_path, ["train", "--out", str(run), "--resume"])
    wait_for_step(proc, run, reached)
    os.kill(worker_pid(proc.pid, rank=1), signal.SIGKILL)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=120)  # the surviving rank must not hang
    assert proc.returncode != 0, out
    assert time.monotonic() - started < 90
    assert f"resume: continuing from step-{paused:07d} (step {paused})" in out
    resume = f"fixedfirst train --resume --out {run} --nproc 2"
    assert (
        "fixedfirst train: error: the process of rank 1 was killed by SIGKILL (out of memory?); "
        f"the newest complete checkpoint is intact: resume with `{resume}`"
    ) in out
    assert not (run / "summary.json").exists()
    for ckpt in CheckpointManager(run / "checkpoints").all():
        ckpt.verify()  # whatever is visible as complete is complete
    # Paused, then resumed on two processes: the reference run to the step reached, bit for bit.
    wa, wb = weights_at(runs["ddp"], reached), weights_at(run, reached)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    def upto(records: list[dict]) -> list[tuple]:
        return [r for r in comparable(records) if r[0] <= reached]

    assert upto(train_records(run)) == upto(train_records(runs["ddp"]))
    # The newest checkpoint resumes, here on one process: the run ends as the uninterrupted one
    # did, its switch too, up to the order of summing gradients.
    resume_here(run)
    assert_close_runs(runs["ddp"], run)
    assert_same_switch(runs["ddp"], run)


# A process of `launcher.launch` that stands in for training: it says it is ready and whether it
# leads a session of its own, counts the SIGINTs it handles until a moment after the first (or a
# minute), and exits with Ctrl-C's status. (Two signals sent at once are handled once, so the
# count tells one from none, not one from two sent together.)
COUNTING_WORKER = """
import os, signal, sys, time
from pathlib import Path
received = []
signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
out = Path(sys.argv[1])
# A session of its own (a terminal's Ctrl-C goes to the launcher's group, not to this one).
(out / f"ready-{os.environ['RANK']}").write_text(str(os.getsid(0) == os.getpid()))
deadline = time.monotonic() + 60  # a launcher that passes nothing on fails, not hangs
while not received and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.3)  # a second SIGINT passed on would arrive here
(out / f"received-{os.environ['RANK']}").write_text(str(len(received)))
sys.exit(130)
"""


def test_ctrl_c_to_nproc_reaches_every_process_once(tmp_path, monkeypatch, capsys):
    """The terminal's Ctrl-C reaches the launcher only (its processes have sessions of their
    own), which passes it on once to each and exits with their status, 130, saying nothing of
    its own. What a training process does with it (a checkpoint at the step every rank stops
    at, one line from rank 0) is the SIGUSR1 test's, over the same path."""
    import threading

    from fixedfirst.train import launcher

    script = tmp_path / "counting_worker.py"
    script.write_text(COUNTING_WORKER)
    monkeypatch.setattr(launcher, "WORKER", (sys.executable, str(script)))

    def ctrl_c_once_both_are_ready() -> None:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{rank}").exists() for rank in (0, 1)):
            if time.monotonic() > deadline:
                return  # the launch below then waits on workers that never got a signal
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)  # launch() handles it: it runs in this thread

    before = signal.getsignal(signal.SIGINT)
    sender = threading.Thread(target=ctrl_c_once_both_are_ready, daemon=True)
    sender.start()
    status = launcher.launch(2, [str(tmp_path)], "fixedfirst train --resume --out run --nproc 2")
    sender.join()
    assert status == 130
    assert [(tmp_path / f"ready-{rank}").read_text() for rank in (0, 1)] == ["True", "True"]
    assert [(tmp_path / f"received-{rank}").read_text() for rank in (0, 1)] == ["1", "1"]
    assert capsys.readouterr() == ("", "")
    assert signal.getsignal(signal.SIGINT) == before  # the launcher's handler is put back


def worker_pid(agent_pid: int, rank: int) -> int:
    """The pid of the torchrun worker with RANK=`rank` (a descendant of the agent)."""
    pending = [agent_pid]
    while pending:
        pid = pending.pop()
        for task in Path(f"/proc/{pid}/task").iterdir():
            children = (task / "children").read_text().split()
            pending.extend(int(c) for c in children)
        if pid == agent_pid:
            continue
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no worker with RANK={rank} under pid {agent_pid}")


# -- in process: the pieces the multi-process runs rely on ------------------------------------


def test_a_rows_initial_state_depends_on_its_seed_only():
    """What makes N processes equal 1: a row's noise follows it into any batch split."""
    from fixedfirst.model import LoopedTransformer
    from fixedfirst.train.step import state_seeds
    from tests.conftest import tiny_model_config

    torch.manual_seed(0)
    model = LoopedTransformer(tiny_model_config()).train()
    x = torch.randint(0, 61, (4, 12))
    seeds = state_seeds(seed=0, step=3, rows=range(4))
    whole = model(x, 3, state_seeds=seeds)
    halves = torch.cat([model(x[:2], 3, state_seeds=seeds[:2]), model(x[2:], 3, None, seeds[2:])])
    torch.testing.assert_close(whole, halves, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(whole, model(x, 3, state_seeds=state_seeds(0, 4, range(4))))
    assert state_seeds(0, 3, range(2, 4)) == seeds[2:]


@pytest.mark.parametrize("grad_depth", [None, 1, 3])
@pytest.mark.parametrize("variant", [{}, {"tie_embeddings": True, "injection": "add"}])
def test_every_parameter_gets_a_gradient_at_every_depth(grad_depth, variant):
    """Why DDP needs no find_unused_parameters: nothing is left without a gradient, whatever
    the depth and however few iterations carry gradients."""
    from fixedfirst.model import LoopedTransformer
    from tests.conftest import tiny_model_config

    model = LoopedTransformer(tiny_model_config(**variant)).train()
    x = torch.randint(0, 61, (2, 8))
    for depth in (1, 2, 5):
        model.zero_grad(set_to_none=True)
        model(x, depth, grad_depth).sum().backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, (depth, missing)


def test_ranks_that_disagree_on_the_depth_stop_the_run(tmp_path, monkeypatch):
    from fixedfirst.train import trainer as trainer_module
    from tests.trainer_helpers import tiny_config

    def two_ranks_one_off(world, tensor):
        other = tensor.clone()
        other[-1, 2] += 1  # the other rank's depth of the last step
        return torch.stack([tensor, other])

    monkeypatch.setattr(trainer_module.distributed, "gather", two_ranks_one_off)
    with pytest.raises(RuntimeError, match="ranks trained at different depths"):
        Trainer(tiny_config(), tmp_path / "run", quiet=True).train(stop_after=2)


def test_nproc_starts_the_processes_with_the_other_arguments(tmp_path, monkeypatch):
    from fixedfirst.cli.main import main
    from fixedfirst.train import launcher

    config = write_tiny_config(tmp_path)
    launched = []
    monkeypatch.setattr(launcher, "launch", lambda *a: launched.append(a) or 0)
    run = tmp_path / "run"
    args = ["--out", str(run), "--set", "train.lr=0.002", "--stop-after", "3", "--quiet"]
    with pytest.raises(SystemExit) as info:
        main(["train", str(config), "--nproc", "2", *args])
    assert info.value.code == 0
    resume = f"fixedfirst train --resume --out {run} --nproc 2"
    assert launched == [(2, ["train", str(config), *args], resume)]
    assert not run.exists()  # the launching process writes nothing
    env = launcher.worker_environment(1, 2, 29999)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
        "1",
        "1",
        "2",
        "2",
    )
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29999")


def test_world_from_torchrun_environment(monkeypatch):
    from fixedfirst.errors import UserError
    from fixedfirst.train.distributed import World

    assert World.from_env() == World()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    world = World.from_env()
    assert (world.rank, world.world_size, world.local_rank, world.launched) == (1, 2, 1, True)
    assert world.local_world_size == 1  # torchrun always sets it; a bare RANK means one here
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert World.from_env().local_world_size == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(UserError, match="LOCAL_WORLD_SIZE must be integers"):
        World.from_env()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert not world.is_main
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(UserError, match="outside 0..WORLD_SIZE-1"):
        World.from_env()
