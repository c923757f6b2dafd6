"""Low-rank adapters (`[train.lowrank]`, through peft) on transformers' Inkling2LoopForCausalLM
(tests/inkling_helpers.py's tiny one): only the adapters train, a looped layer's adapters are one
set shared by its passes, merging gives back the plain transformers model, checkpoints hold the
adapters and name their base, a resume is exact and one on other base weights is refused."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from fixedfirst.config import LowRankConfig, load_config
from fixedfirst.errors import UserError
from fixedfirst.model.kinds import build_run_model
from fixedfirst.model.lowrank import apply_lowrank, base_identity, merge_lowrank, save_adapters
from fixedfirst.train.trainer import Trainer
from tests.inkling_helpers import INKLING_TOML, TINY, PassCounter, needs_inkling, tiny_inkling
from tests.trainer_helpers import comparable, final_weights, train_records

peft = pytest.importorskip("peft")
pytestmark = needs_inkling

LOWRANK_TOML = INKLING_TOML + "\n[train.lowrank]\nrank = 4\n"
"""The tiny Inkling2Loop run of tests/inkling_helpers.py, with rank-4 adapters on the default
targets (attention projections and experts)."""


def lowrank_config(directory, *overrides: str):
    path = directory / "lowrank.toml"
    path.write_text(LOWRANK_TOML)
    return load_config(path, list(overrides))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The low-rank run trained straight through (10 steps, the first 5 at one pass)."""
    root = tmp_path_factory.mktemp("lowrank-run")
    config = lowrank_config(root)
    Trainer(config, root / "run", quiet=True).train()
    return {"root": root, "config": config}


def test_a_step_trains_the_adapters_alone():
    """One optimizer step of the trainer's own step: every base weight bit for bit as it was,
    every adapter's B (zero at the start) moved; the step's gradient reached no base weight."""
    from fixedfirst.data.source import Batch
    from fixedfirst.train.optim import build_optimizer
    from fixedfirst.train.parallel import ParallelModel
    from fixedfirst.train.step import StepContext, train_step

    config = load_config_text(LOWRANK_TOML)
    model = build_run_model(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = build_optimizer(model, config.train)
    context = StepContext(ParallelModel.alone(model), optimizer, config.train)
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(0))
    train_step(context, Batch(tokens[:, :-1], tokens[:, 1:]), 2, 1e-2, [0] * 4)
    adapters = [n for n, _ in model.named_parameters() if "lora_" in n]
    assert adapters and {n for n, p in model.named_parameters() if p.requires_grad} == set(adapters)
    for name, p in model.named_parameters():
        if name in adapters:
            if "lora_B" in name:
                assert not torch.equal(p, before[name]), name
        else:
            assert torch.equal(p, before[name]), name
    assert sum(p.numel() for p in optimizer.param_groups[0]["params"]) + sum(
        p.numel() for p in optimizer.param_groups[1]["params"]
    ) == sum(model.state_dict()[n].numel() for n in adapters)


def load_config_text(text: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "run.toml"
        path.write_text(text)
        return load_config(path)


def test_a_looped_layers_adapters_are_shared_by_its_passes():
    """One adapter per adapted module of the looped layer, not one per pass: the same lora_A runs
    at each of the 3 passes, and its gradient is the sum over the passes (checked against the
    gradient of the same computation with the adapter's weight copied per pass by hand)."""
    network = apply_lowrank(tiny_inkling(), LowRankConfig(rank=2))
    looped = TINY["loop_layer_index_start"]
    names = [n for n, _ in network.named_parameters() if "lora_A" in n]
    per_layer = [n for n in names if f"layers.{looped}.self_attn.q_proj" in n]
    assert len(per_layer) == 1  # one adapter for all passes
    assert len(names) == 3 * (len(LowRankConfig().targets) + len(LowRankConfig().parameters))
    lora_a = network.get_submodule(per_layer[0].removesuffix(".weight"))
    calls = []
    lora_a.register_forward_hook(lambda *_: calls.append(1))
    counter = PassCounter().attach(network.get_base_model())
    network.config.loop_num_passes = 3
    with torch.no_grad():  # B = 0 hides the adapters: give them something to say
        for name, p in network.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    network(input_ids=tokens, use_cache=False).logits.square().mean().backward()
    assert counter.passes == [3] and len(calls) == 3
    assert lora_a.weight.grad is not None and lora_a.weight.grad.abs().sum() > 0


def test_merging_gives_back_the_plain_model_and_adapters_save_in_peft_format(tmp_path):
    """merge_lowrank returns transformers' own class computing what the adapted model computes;
    save_adapters writes peft's files, which peft loads onto a fresh base to the same logits."""
    from transformers import Inkling2LoopForCausalLM

    network = apply_lowrank(tiny_inkling(seed=3), LowRankConfig(rank=2))
    with torch.no_grad():
        for name, p in network.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    network.config.loop_num_passes = 2
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        adapted = network(input_ids=tokens, use_cache=False).logits
    save_adapters(network, tmp_path / "adapters")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {
        p.name for p in (tmp_path / "adapters").iterdir()
    }
    reloaded = peft.PeftModel.from_pretrained(tiny_inkling(seed=3), tmp_path / "adapters")
    reloaded.config.loop_num_passes = 2
    merged = merge_lowrank(network)
    assert type(merged) is Inkling2LoopForCausalLM
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=tokens, use_cache=False).logits, adapted)
        merged_logits = merged(input_ids=tokens, use_cache=False).logits
    torch.testing.assert_close(merged_logits, adapted, rtol=1e-4, atol=1e-5)
    assert not torch.equal(adapted, tiny_inkling(seed=3)(input_ids=tokens).logits)


def test_checkpoints_hold_the_adapters_and_name_their_base(straight):
    """No base weight in model.safetensors; meta.json names the base by the SHA-256 of the
    frozen weights as the run built them."""
    run = straight["root"] / "run"
    weights = final_weights(run)
    assert weights and all("lora_" in k or k.endswith("e_score_correction_bias") for k in weights)
    model = build_run_model(straight["config"])
    steps = sorted((run / "checkpoints").glob("step-*"))
    meta = json.loads((steps[-1] / "meta.json").read_text())
    assert meta["base_weights"] == base_identity(model)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {k for k in weights if "lora_" in k}


def test_resume_is_exact(straight, tmp_path):
    """Paused at step 3 and at 7 and resumed: the adapters and the log bit for bit those of the
    run straight through."""
    config = straight["config"]
    Trainer(config, tmp_path / "paused", quiet=True).train(stop_after=3)
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train(stop_after=7)
    Trainer(config, tmp_path / "paused", resume=True, quiet=True).train()
    a, b = final_weights(straight["root"] / "run"), final_weights(tmp_path / "paused")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert comparable(train_records(straight["root"] / "run")) == comparable(
        train_records(tmp_path / "paused")
    )


def test_a_resume_on_other_base_weights_is_refused(straight, tmp_path, monkeypatch):
    """A machine whose transformers initialises the model otherwise builds another base from
    the same configuration: resuming the adapters on it is refused in one line."""
    import shutil

    from transformers.models.inkling2_loop import modeling_inkling2_loop as modeling

    run = tmp_path / "run"
    shutil.copytree(straight["root"] / "run", run)
    original = modeling.Inkling2LoopPreTrainedModel._init_weights

    def other_init(self, module):
        original(self, module)
        if isinstance(module, modeling.Inkling2LoopTopKRouter):
            torch.nn.init.normal_(module.weight, std=0.5)

    monkeypatch.setattr(modeling.Inkling2LoopPreTrainedModel, "_init_weights", other_init)
    with pytest.raises(UserError, match="adapters were trained on other base weights"):
        Trainer(straight["config"], run, resume=True, quiet=True)


def test_eval_scores_the_base_with_the_adapters_merged(straight, tmp_path, capsys):
    """`fixedfirst eval` of a low-rank run against an independent reference: the base built
    from the seed, the checkpoint's adapters loaded by peft's own state-dict loader, merged into
    transformers' model, scored with cross-entropy at each depth."""
    from fixedfirst.cli.main import main
    from fixedfirst.data.registry import build_source

    run, out = straight["root"] / "run", tmp_path / "eval.json"
    with pytest.raises(SystemExit) as info:
        main(["eval", str(run), "--depths", "1,3", "--out", str(out)])
    assert info.value.code in (0, None), capsys.readouterr().err
    result = json.loads(out.read_text())
    config = straight["config"]
    torch.manual_seed(config.train.seed)
    model = build_run_model(config)
    adapters = {k.removeprefix("network."): v for k, v in final_weights(run).items()}
    missing, unexpected = model.network.load_state_dict(adapters, strict=False)
    assert not unexpected and all("lora_" not in k for k in missing)
    merged = merge_lowrank(model.network)
    batch = build_source(config).validation_batches(1, 4)[0]
    for depth in (1, 3):
        merged.config.loop_num_passes = depth
        with torch.no_grad():
            logits = merged.eval()(input_ids=batch.inputs).logits
        nll = F.cross_entropy(logits.flatten(0, 1).float(), batch.targets.flatten()).item()
        assert result["nll_by_depth"][str(depth)] == pytest.approx(nll, rel=1e-5), depth


def test_a_sigterm_pauses_it_with_a_checkpoint_and_the_resume_is_exact(straight, tmp_path):
    """A scheduler's SIGTERM during step 4: the step completes, a paused checkpoint of the
    adapters is saved, the run stops for requeue; resumed, it ends bit for bit as the run
    straight through."""
    import os
    import signal

    from fixedfirst.train.interrupt import REQUEUE_STATUS, TrainingInterrupted

    config, run = straight["config"], tmp_path / "stopped"
    trainer = Trainer(config, run, quiet=True)
    steps = []

    def preempt(optimizer, args, kwargs):
        steps.append(1)
        if len(steps) == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer.optimizer.register_step_post_hook(preempt)
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert info.value.exit_status == REQUEUE_STATUS
    saved = sorted((run / "checkpoints").glob("step-*"))[-1]
    assert "paused" in json.loads((saved / "meta.json").read_text())["tags"]
    assert len(train_records(run)) < 10
    Trainer(config, run, resume=True, quiet=True).train()
    a, b = final_weights(straight["root"] / "run"), final_weights(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
