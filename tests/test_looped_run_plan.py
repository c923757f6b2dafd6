"""`fixedfirst plan RUN.toml` for a run of a transformers looped architecture (`[model] kind =
"transformers"`): the same memory model as `plan --model-config`, at the run's own batch,
sequence length, schedule depths, [train.lowrank] and strategy. The reference is the
`--model-config` plan of Inkling 2 Mini's config.json at the same settings, read from its
printed table; DDP's buckets are held to a hand count of the parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixedfirst.cli.main import main
from tests.inkling_helpers import HAS_INKLING, INKLING_TOML, TINY, toml_value

pytestmark = pytest.mark.skipif(not HAS_INKLING, reason="needs transformers >= 5.24")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/models/inkling2-mini/config.json"
NOT_OPTIONS = {"architectures", "model_type", "loop_num_passes", "torch_dtype"}
"""config.json's keys that are not the architecture's [model.transformers] table."""
SETTINGS = ["--gpus", "8", "--gpu", "h100"]


def printed(capsys, *argv: object) -> str:
    with pytest.raises(SystemExit) as done:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert done.value.code in (0, None), captured.err
    return captured.out


def table_rows(text: str) -> dict[tuple[str, str, str], list[str]]:
    """(depth, training, checkpointing) -> the other cells, of the table with those columns."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit() and cells[1] in ("full", "low-rank"):
            rows[(cells[0], cells[1], cells[2])] = cells[3:]
    return rows


def mini_run(directory: Path, lowrank: bool) -> Path:
    """Inkling 2 Mini's architecture as a run: 8 sequences of 4,096 tokens a step on 8 GPUs
    under FSDP2 (one sequence each), two passes and then 1 to 6."""
    data = json.loads(CONFIG.read_text())
    table = "\n".join(f"{k} = {toml_value(v)}" for k, v in data.items() if k not in NOT_OPTIONS)
    path = directory / ("lowrank.toml" if lowrank else "full.toml")
    path.write_text(
        '[model]\nkind = "transformers"\narchitecture = "Inkling2LoopForCausalLM"\n\n'
        f"[model.transformers]\n{table}\n\n"
        '[schedule]\nkind = "fixed-first"\nk0 = 2\nswitch = 0.5\nk_max = 6\n\n'
        '[train]\ntokens = 6_553_600\nbatch_size = 8\nseq_len = 4096\nstrategy = "fsdp"\n'
        + ("\n[train.lowrank]\nrank = 16\n" if lowrank else "")
    )
    return path


@pytest.mark.parametrize("lowrank", [False, True], ids=["full", "low-rank"])
def test_a_runs_rows_are_the_model_config_plan_of_its_architecture(capsys, tmp_path, lowrank):
    """Every row of the run's table (its training, checkpointing off and on, each depth the
    schedule draws) is the `--model-config` plan's row at the same depth, training and
    checkpointing: a run that ignored its [train.lowrank] would print full fine-tuning's
    numbers under low-rank's name, and the two differ."""
    pytest.importorskip("peft")
    run = printed(capsys, "plan", mini_run(tmp_path, lowrank), *SETTINGS)
    finish = ["--seq-len", 4096, "--micro-batch", 1, "--depths", "1..6"]
    reference = table_rows(printed(capsys, "plan", "--model-config", CONFIG, *SETTINGS, *finish))
    rows = table_rows(run)
    training = "low-rank" if lowrank else "full"
    assert sorted(rows) == sorted(k for k in reference if k[1] == training)
    for key, cells in rows.items():
        assert cells == reference[key], key
    other = "full" if lowrank else "low-rank"
    assert reference[("6", training, "on")][4] != reference[("6", other, "on")][4]  # peaks
    assert "FSDP2 over 8 GPUs" in run and "deepest training depth 6" in run
    assert "hours" in run and "assumed for this architecture" in run


def test_ddp_holds_a_second_copy_of_the_gradients(tmp_path):
    """Under DDP a step holds its buckets, one more fp32 copy of every trained gradient, beside
    what one GPU holds: 4 bytes per parameter of the model transformers builds."""
    import torch
    from transformers import Inkling2LoopForCausalLM
    from transformers.models.inkling2_loop import Inkling2LoopTextConfig

    from fixedfirst.config import load_config
    from fixedfirst.machine.planning import placement_on, step_memory

    (tmp_path / "inkling.toml").write_text(INKLING_TOML)
    config = load_config(tmp_path / "inkling.toml")
    with torch.device("meta"):
        built = Inkling2LoopForCausalLM(Inkling2LoopTextConfig(**TINY))
    count = sum(p.numel() for p in built.parameters())
    alone = step_memory(config, placement_on(config, "single", 2), 4, 4, 3, False)
    ddp = step_memory(config, placement_on(config, "ddp", 2), 4, 4, 3, False)
    assert alone.gradients == 4 * count
    assert ddp.gradients == 8 * count
    assert ddp.peak - alone.peak == 4 * count


def test_accumulating_micro_batches_holds_every_gradient_through_the_next_forward(tmp_path):
    """Two micro-batches of 2 a step instead of one of 2: the second's forward runs beside every
    trained gradient (4 bytes per trained parameter) and both micro-batches' tokens."""
    from fixedfirst.compute.memory import INDEX
    from fixedfirst.config import load_config
    from fixedfirst.machine.planning import placement_on, run_shape, step_memory

    (tmp_path / "inkling.toml").write_text(INKLING_TOML + "\n[train.lowrank]\nrank = 4\n")
    pytest.importorskip("peft")
    config = load_config(tmp_path / "inkling.toml")
    where = placement_on(config, "single", 1)
    once = step_memory(config, where, 2, 2, 3, False)
    twice = step_memory(config, where, 2, 4, 3, False)
    trained = run_shape(config).trained
    tokens = 2 * config.train.seq_len
    assert twice.peak >= once.peak + 4 * trained + 2 * INDEX * tokens
    assert twice.gradients == once.gradients == 4 * trained


def test_the_model_config_flags_are_refused_with_a_run(capsys):
    """--seq-len given with a run TOML would be ignored; it is refused, naming the key."""
    with pytest.raises(SystemExit) as done:
        main(["plan", str(ROOT / "configs/inkling-tiny.toml"), "--seq-len", "512"])
    assert done.value.code == 2
    assert "train.seq_len" in capsys.readouterr().err
