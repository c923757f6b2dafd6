"""One rank of tests/test_any_loop_distributed.py, started by torchrun: a tiny Inkling2Loop model
under DistributedDataParallel (gloo), trained with fixed-first and an auto switch twice, in a
plain loop (`DepthScheduler`) and through the Hugging Face Trainer (`FixedFirstCallback`). Each
rank writes the passes every forward ran and where it switched to OUT/rank-R.json."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from fixedfirst.compute.measured import measure_flops
from fixedfirst.compute.plan import plan_schedule
from fixedfirst.config import ScheduleConfig, SwitchConfig
from fixedfirst.model.handles import depth_handle
from fixedfirst.scheduling.depth_scheduler import DepthScheduler
from tests.inkling_helpers import PassCounter, batches, tiny_inkling

STEPS = 24
SCHEDULE = ScheduleConfig(kind="fixed-first", k0=1, switch="auto", k_min=1, k_max=4)
SWITCH = SwitchConfig(rule="plateau", floor=0.4, ceiling=0.9, window=0.25, every=1, threshold=50.0)
"""A threshold far above a tiny model's fall in loss (about a nat over the run) and far below
rank 1's series (240 nats per unit fraction of the run): rank 0's loss fires the rule at the
floor (step 10), rank 1's series never would."""
FALLING = 100.0
"""Rank 1's series at step s: FALLING - 10 s."""


def plain_loop(rank: int, out: dict) -> None:
    """Each rank trains on its own rows and watches its own series: rank 0 its loss, rank 1 a
    series still falling steeply (as one rank's noisy loss can be), which alone would switch it
    at the ceiling. Rank 0's decision, broadcast, is the one both follow."""
    model = tiny_inkling()
    counter = PassCounter().attach(model)
    x = batches(4, 16, 99)
    cost = measure_flops(model, lambda: model(input_ids=x, labels=x).loss, tokens=x.numel())
    plan = plan_schedule(SCHEDULE, cost, 2 * x.numel(), steps=STEPS, switch=SWITCH)
    counter.passes.clear()  # planning counts the plan's deepest depth once more
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    scheduler = DepthScheduler(plan, depth_handle(ddp))
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=3e-3)
    for step in range(STEPS):
        scheduler.begin(step)
        tokens = batches(4, 16, 1000 * rank + step)
        loss = ddp(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        watched = loss.item() if rank == 0 else FALLING - 10.0 * step
        scheduler.observe(step + 1, watched)
    out["plain"] = {"passes": counter.passes, "switch_step": scheduler.switch_step}


def trainer_run(rank: int, out: dict, directory: Path) -> None:
    from transformers import Trainer, TrainingArguments

    from fixedfirst.scheduling.hf_trainer import FixedFirstCallback

    model = tiny_inkling()
    counter = PassCounter().attach(model)
    x = batches(4, 16, 99)
    cost = measure_flops(model, lambda: model(input_ids=x, labels=x).loss, tokens=x.numel())
    plan = plan_schedule(SCHEDULE, cost, 2 * x.numel(), steps=STEPS, switch=SWITCH)
    counter.passes.clear()  # planning counts the plan's deepest depth once more
    rows = [{"input_ids": r, "labels": r} for r in batches(2 * STEPS * 2, 16, 5)]
    args = TrainingArguments(
        output_dir=str(directory),
        max_steps=STEPS,
        per_device_train_batch_size=2,
        logging_steps=1,
        save_strategy="no",
        learning_rate=3e-3,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        ddp_find_unused_parameters=True,
        disable_tqdm=True,
        seed=0,
    )
    callback = FixedFirstCallback(plan)
    Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback]).train()
    assert callback.scheduler is not None
    out["trainer"] = {"passes": counter.passes, "switch_step": callback.scheduler.switch_step}


def main() -> None:
    directory = Path(sys.argv[1])
    timeout = datetime.timedelta(seconds=int(os.environ.get("FIXEDFIRST_DIST_TIMEOUT", "60")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    torch.set_num_threads(1)
    out: dict = {}
    plain_loop(rank, out)
    trainer_run(rank, out, directory / "trainer")
    (directory / f"rank-{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
