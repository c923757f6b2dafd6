"""What only a GPU can check: bf16 training, torch.compile, FSDP2 over NCCL and cached decoding on
CUDA, each against the plain fp32 eager computation it stands in for.

Marked `gpu`: skipped without CUDA ("needs CUDA"), run by benchmarks/first_run.py on the day a
GPU is lent. `FIXEDFIRST_GPU_TEST_DEVICE=cpu pytest -m gpu tests/test_gpu.py` runs the same
bodies on the CPU (gloo instead of NCCL), which is how they were checked before any GPU.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from fixedfirst.config import TrainConfig
from fixedfirst.data.source import Batch
from fixedfirst.model import LoopedTransformer
from fixedfirst.train.optim import build_optimizer
from fixedfirst.train.parallel import ParallelModel
from fixedfirst.train.step import StepContext, state_seeds, train_step
from tests.conftest import tiny_model_config

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("FIXEDFIRST_GPU_TEST_DEVICE", "cuda")
CONFIG = tiny_model_config(d_model=64, vocab_size=97)
TRAIN = TrainConfig(batch_size=8, seq_len=32, lr=2e-3)


@pytest.fixture
def device() -> torch.device:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return torch.device(DEVICE)


def batch(step: int, device: torch.device) -> Batch:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(0, CONFIG.vocab_size, (TRAIN.batch_size, TRAIN.seq_len + 1), generator=g)
    return Batch(x[:, :-1].to(device), x[:, 1:].to(device))


def train(model: ParallelModel, device, dtype=torch.float32, steps=4) -> list[float]:
    """`steps` steps at depth 4 on one batch (so that the loss falls); the losses."""
    context = StepContext(model, build_optimizer(model.module, TRAIN), TRAIN, dtype)
    losses = []
    for step in range(steps):
        seeds = state_seeds(0, step, range(TRAIN.batch_size))
        loss, _ = train_step(context, batch(0, device), 4, TRAIN.lr, seeds)
        losses.append(loss.item())
    return losses


def fresh_model(device: torch.device) -> LoopedTransformer:
    torch.manual_seed(0)
    return LoopedTransformer(CONFIG).to(device).train()


def test_bf16_autocast_training_follows_fp32(device):
    fp32 = train(ParallelModel.alone(fresh_model(device)), device)
    bf16 = train(ParallelModel.alone(fresh_model(device)), device, torch.bfloat16)
    assert fp32[-1] < fp32[0] - 0.1  # the steps train
    assert max(abs(a - b) for a, b in zip(fp32, bf16, strict=True)) < 0.02, (fp32, bf16)


def test_the_compiled_loop_computes_what_the_eager_one_does(device):
    eager = fresh_model(device)
    compiled = copy.deepcopy(eager)
    compiled.compile_loop()
    x = batch(0, device).inputs
    outputs = []
    for model in (eager, compiled):
        logits = model(x, 3, state_seeds=list(range(len(x))))
        logits.square().mean().backward()
        outputs.append((logits.detach(), [p.grad for p in model.parameters()]))
    torch.testing.assert_close(outputs[1][0], outputs[0][0], rtol=1e-4, atol=1e-5)
    for a, b in zip(outputs[1][1], outputs[0][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)


def test_fsdp2_on_one_rank_trains_like_the_plain_model(device, tmp_path):
    import torch.distributed as dist

    from fixedfirst.train.distributed import World

    plain = fresh_model(device)
    plain_losses = train(ParallelModel.alone(plain), device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        sharded = fresh_model(device)
        parallel = ParallelModel(
            sharded, World(0, 1, 0, launched=True), "fsdp", device, torch.float32
        )
        losses = train(parallel, device)
        weights, _ = parallel.full_state(build_optimizer(parallel.module, TRAIN))
    finally:
        dist.destroy_process_group()
    assert losses == pytest.approx(plain_losses, rel=1e-5)
    for name, value in plain.state_dict().items():
        if name in weights:
            torch.testing.assert_close(weights[name], value.cpu(), rtol=1e-5, atol=1e-6)


def test_cached_generation_equals_the_uncached_forward(device):
    model = fresh_model(device).eval()
    prompt = batch(0, device).inputs[:2, :6]
    cached = model.generate(prompt, max_new_tokens=10, depth=4)
    tokens = prompt
    with torch.no_grad():
        for _ in range(10):
            next_token = model(tokens, 4)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, next_token], dim=1)
    assert torch.equal(cached, tokens)
