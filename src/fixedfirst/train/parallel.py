"""How the model is spread over processes: DDP replicas or FSDP2 shards, and full state dicts.

DDP (the default) keeps a whole copy of the model and of AdamW's state on every device and
averages gradients during backward. It is the fastest choice whenever parameters, gradients and
the two AdamW moments fit on one device (16 bytes per parameter in float32, plus activations).
FSDP2 (`fully_shard`, `[train] strategy = "fsdp"`) splits parameters, gradients and optimizer
state over the devices and all-gathers a block's weights just before it runs: choose it when
DDP runs out of memory. With bf16 precision FSDP2 computes in bf16 and reduces gradients in
float32 (`MixedPrecisionPolicy`), keeping float32 master weights in the shards.

Checkpoints hold FULL tensors under either strategy (torch.distributed.checkpoint's state-dict
API gathers them onto rank 0's CPU and, on load, broadcasts them from rank 0 and re-shards), so a
checkpoint written by N processes resumes on M, or opens in `fixedfirst eval` with no process group.
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import torch
from torch import nn

from fixedfirst.data.source import Batch
from fixedfirst.evaluation.nll import validation_nll
from fixedfirst.model import LoopedLM
from fixedfirst.model.lowrank import base_identity, frozen_names
from fixedfirst.runs.checkpoint import BASE_KEY, state_shapes, tied_aliases
from fixedfirst.train.distributed import World, broadcast_object


class ParallelModel:
    """The model as this run trains it.

    `module` is the model itself (sharded in place under FSDP2): evaluation, state dicts and the
    optimizer use it. `train_module` is what the training forward calls: the DDP wrapper, or the
    same module for FSDP2 and for a single process.
    """

    def __init__(
        self,
        model: LoopedLM,
        world: World,
        strategy: str,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.module = model
        self.world = world
        self.device = device
        # What a low-rank run's checkpoints name their frozen base by: hashed on rank 0, which
        # writes and checks them, from the full weights (before FSDP2 shards them).
        self.base_identity = base_identity(model) if world.is_main else None
        self.strategy = strategy if world.launched else "single"
        self.train_module: nn.Module = model
        if self.strategy == "ddp":
            self.train_module = self._ddp(model, device)
        elif self.strategy == "fsdp":
            self._fully_shard(model, world, device, dtype)

    @classmethod
    def alone(cls, model: LoopedLM) -> ParallelModel:
        """`model` trained by this process alone: no wrapper, no collectives."""
        return cls(model, World(), "single", next(model.parameters()).device, torch.float32)

    @staticmethod
    def _ddp(model: LoopedLM, device: torch.device) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        # find_unused_parameters is False (no extra graph walk each step) for our own model,
        # where every parameter receives a gradient at every step, whatever the depth K >= 1
        # and grad_depth:
        # the embedding, prelude, final norms, coda and head run once per forward with gradients;
        # the adapter and the core run at every iteration, and at least the last
        # min(K, grad_depth) >= 1 iterations carry gradients (truncated backprop only moves the
        # earlier ones under no_grad). DDP's hooks fire once per parameter per backward however
        # often the core was applied, because autograd sums a reused parameter's gradient before
        # accumulating it. tests/test_distributed.py runs varying depths with grad_depth < K.
        # A model that declares otherwise (model/interface.py: a transformers looped model, whose
        # message gates run only from the second pass) has DDP find the parameters each step
        # leaves unused.
        # broadcast_buffers=False: the buffers (rotary tables, the evaluation initial state) are
        # deterministic functions of the configuration, identical on every rank.
        return DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            broadcast_buffers=False,
            find_unused_parameters=model.leaves_parameters_unused,
        )

    @staticmethod
    def _fully_shard(
        model: LoopedLM, world: World, device: torch.device, dtype: torch.dtype
    ) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import (
            MixedPrecisionPolicy,
            fully_shard,
            register_fsdp_forward_method,
        )

        mesh = init_device_mesh(device.type, (world.world_size,))
        policy = MixedPrecisionPolicy()
        if dtype == torch.bfloat16 and model.gathers_in_bf16:
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        # One FSDP unit per block that runs once per forward (our prelude and coda blocks, a
        # transformers looped model's layers outside the loop): its weights are gathered just
        # before use and freed right after. What runs at every iteration (our adapter and core,
        # the looped layers) is NOT a separate unit but stays with the root: the core runs K
        # times per forward and K times per backward, so its own unit would all-gather it 2K
        # times a step, and FSDP2's post-backward hook fires after each application's backward,
        # before autograd has summed the shared weights' gradient over all K applications. The
        # core is needed from the first iteration to the last anyway, so keeping it gathered for
        # the step costs no peak memory. A model whose modules must compute in float32 is
        # gathered in float32 (`gathers_in_bf16`): autocast computes the rest in bf16.
        for block in model.once_per_forward():
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        # Evaluation calls nll_by_depth (or row_nll_by_depth), not forward: it must gather the
        # root's weights too.
        register_fsdp_forward_method(model, "nll_by_depth")
        register_fsdp_forward_method(model, "row_nll_by_depth")

    def base_record(self) -> dict[str, str]:
        """What a checkpoint's meta.json says of the frozen base (nothing when all trains)."""
        return {} if self.base_identity is None else {BASE_KEY: self.base_identity}

    def gradient_sync(self, enabled: bool) -> contextlib.AbstractContextManager[None]:
        """Around one micro-batch's forward and backward: reduce gradients across ranks only on
        the last micro-batch of a step (the others accumulate locally). Under FSDP2 the root
        unit (embedding, core, head: most of the weights) also stays gathered from one
        micro-batch to the next, and is freed after the last one's backward: gathered once a
        step, not once a micro-batch (the memory model counts it gathered for the step)."""
        # DDP's no_sync and FSDP2's methods exist on the wrapped module at run time only
        if self.strategy == "ddp" and not enabled:
            return self.train_module.no_sync()  # type: ignore[operator]
        if self.strategy == "fsdp":
            self.module.set_requires_gradient_sync(enabled)  # type: ignore[operator]
            self.module.set_reshard_after_backward(enabled, recurse=False)  # type: ignore[operator]
        return contextlib.nullcontext()

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the global gradient norm; return it (a plain tensor, the same on every rank)."""
        params = [p for p in self.module.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        full_tensor = getattr(norm, "full_tensor", None)  # a DTensor under FSDP2
        return full_tensor() if full_tensor is not None else norm

    def evaluate(
        self, batches: list[Batch], depths: list[int], dtype: torch.dtype
    ) -> dict[int, float]:
        """Held-out NLL at each of `depths` (`validation_nll`): on every rank alike, since FSDP2
        gathers the weights from all of them, and the weights it gathered freed after."""
        nll = validation_nll(self.module, batches, depths, self.device, dtype)
        self.after_eval()
        return nll

    def after_eval(self) -> None:
        """Free the weights evaluation gathered (FSDP2 keeps the root's after a forward)."""
        if self.strategy == "fsdp":
            self.module.reshard()  # type: ignore[operator]  # fully_shard adds it at run time

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Canonical parameter name -> full (unsharded) shape."""
        return {name: tuple(p.shape) for name, p in self.module.named_parameters()}

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """What a checkpoint of the model holds: parameters and persistent buffers (full
        shapes)."""
        return state_shapes(self.module)

    def optimizer_parameter_names(self, optimizer: torch.optim.Optimizer) -> list[list[str]]:
        """The names of each optimizer group's parameters, in order (how full optimizer state
        dicts refer to parameters)."""
        names = {id(p): name for name, p in self.module.named_parameters()}
        return [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]

    # -- full state dicts ------------------------------------------------------------------------

    def full_state(
        self, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(weights, optimizer state) as full CPU tensors on rank 0 (empty dicts elsewhere).

        A collective under FSDP2: every rank must call it. Optimizer state is keyed by parameter
        name, not by position, so it loads into any sharding of the same model.
        """
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        # A low-rank run's frozen base is not saved (its checkpoints name it by base_identity).
        options = StateDictOptions(
            full_state_dict=True, cpu_offload=True, ignore_frozen_params=True
        )
        # torch types the values as any state (DTensors, nested dicts); full_state_dict makes
        # the model's plain tensors
        weights = cast(dict[str, torch.Tensor], get_model_state_dict(self.module, options=options))
        optim = get_optimizer_state_dict(self.module, optimizer, options=options)
        for alias in tied_aliases(self.module):
            weights.pop(alias, None)
        return weights, optim

    def load_full_state(
        self,
        optimizer: torch.optim.Optimizer,
        weights: dict[str, torch.Tensor],
        optim: dict[str, Any],
    ) -> None:
        """Load full state that rank 0 holds (other ranks pass empty dicts) into every rank.

        A collective when launched: every rank must call it. The caller checks on rank 0 that the
        state fits the model before, so that no rank fails half-way through the broadcast.
        """
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        state: dict[str, Any] = dict(weights)
        if self.world.is_main:
            for alias, canonical in tied_aliases(self.module).items():
                state[alias] = state[canonical]
        options = StateDictOptions(
            full_state_dict=True,
            broadcast_from_rank0=self.world.launched,
            strict=not frozen_names(self.module),  # a low-rank run's frozen base is not loaded
        )
        set_model_state_dict(self.module, state, options=options)
        # A parameter no step has given a gradient yet (a transformers looped model's message
        # gates through a fixed stage at one pass) has no AdamW state, in the checkpoint as in
        # the run that wrote it (the names were checked on rank 0). torch gives every parameter
        # a state first, by a step at zero gradients; those left without one in the checkpoint
        # lose it again, so that their first real step counts as their first, as it did.
        stated = broadcast_object(self.world, sorted(optim.get("state", {})))
        optimizer_options = StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=self.world.launched, strict=False
        )
        set_optimizer_state_dict(self.module, optimizer, optim, options=optimizer_options)
        with_state = set(stated)
        for name, p in self.module.named_parameters():
            if name not in with_state:
                optimizer.state.pop(p, None)
