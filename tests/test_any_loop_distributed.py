"""Two gloo ranks (torchrun) train a tiny Inkling2Loop model with fixed-first and an auto switch,
in a plain loop and through the Hugging Face Trainer (tests/any_loop_ranks.py): both ranks run
the same passes at every step, across the switch, and switch where rank 0's rule says, though
rank 1's own series would have switched it at the ceiling."""

from __future__ import annotations

import json
import subprocess
import sys

from fixedfirst.compute.flops import FlopModel
from fixedfirst.compute.plan import plan_schedule
from fixedfirst.switching.policy import replay
from tests.any_loop_ranks import FALLING, SCHEDULE, STEPS, SWITCH
from tests.inkling_helpers import needs_inkling
from tests.test_distributed import ROOT, environment

pytestmark = needs_inkling


def test_both_ranks_run_the_same_passes_at_every_step_across_an_auto_switch(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", str(ROOT / "tests" / "any_loop_ranks.py"), str(tmp_path)]
    done = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    plan = plan_schedule(SCHEDULE, FlopModel(1.0, 1.0, 1.0), 1, steps=STEPS, switch=SWITCH)
    floor, ceiling = plan.switch_window or (None, None)
    alone, _ = replay(SWITCH, STEPS, [(s + 1, FALLING - 10.0 * s) for s in range(STEPS)])
    assert alone.step == ceiling and alone.reason == "ceiling"
    for loop in ("plain", "trainer"):
        assert rank0[loop] == rank1[loop], loop
        assert rank0[loop]["switch_step"] == floor
        decided = plan.decided(floor)
        assert rank0[loop]["passes"] == [decided.depth(s) for s in range(STEPS)], loop
    assert len(set(rank0["plain"]["passes"][floor:])) > 1
