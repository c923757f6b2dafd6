"""The looped ("middle-loop") transformer: an untied prelude, a shared core run K times, a coda.

One set of weights serves any depth K (Huginn; Saunshi et al. 2025). The concat adapter's
prelude half is computed once per forward while its weight stays the (d, 2d) matrix of the concat
form, and evaluation at many depths is one pass of the recurrence (`logits_by_depth`); the
forward's pieces are public so that decoding rules can stop or branch between iterations
(docs/design.md §1, §16).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as checkpoint_call

from fixedfirst.config import ModelConfig
from fixedfirst.config.limits import MAX_DEPTH
from fixedfirst.errors import UserError
from fixedfirst.model.interface import LoopedLM
from fixedfirst.model.kv_cache import FULL_CACHE, CacheStrategy, KVCache, LayerCaches
from fixedfirst.model.layers import Block, RMSNorm, RotaryEmbedding
from fixedfirst.model.loss import next_token_loss
from fixedfirst.model.shared_prefix import AtDepth, PrefixRows, SharedPrefix


def check_depth(depth: object, name: str = "depth") -> int:
    """Depth must be an integer >= 1 (K = 0 would skip the core entirely) and at most
    MAX_DEPTH (the cost is linear in it); `name` is what the user gave it as (`--max-depth`)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UserError(f"{name} must be an integer >= 1, got {depth!r}")
    if depth > MAX_DEPTH:
        raise UserError(
            f"{name} must be <= {MAX_DEPTH:,} (the cost grows linearly with depth), got {depth:,}"
        )
    return depth


STATE_CLIP = 3.0
"""The initial state's truncation, in standard deviations."""


def truncated_normal(
    shape: Sequence[int],
    std: float,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """N(0, std^2) truncated to +-STATE_CLIP std, in float32, by the inverse CDF: one uniform
    draw per value mapped through the normal quantile. torch's `trunc_normal_` rejects and
    redraws until every value lies inside, asking the device after each round whether any is
    left: a host sync per draw in every training step (docs/design.md §1)."""
    edge = 0.5 * math.erfc(STATE_CLIP / math.sqrt(2.0))  # P(Z < -clip)
    u = torch.empty(tuple(shape), dtype=torch.float32, device=device)
    u.uniform_(edge, 1.0 - edge, generator=generator)
    return torch.special.ndtri(u).mul_(std)


def evaluation_state(length: int, d: int, std: float, seed: int) -> torch.Tensor:
    """The fixed evaluation state (length, d): N(0, std^2) truncated to +-STATE_CLIP std, drawn
    on the CPU from a generator seeded by `seed`, by rejection (every value outside the bounds
    is redrawn, the whole tensor's worth at a time, until none is). That is how torch 2.13's
    `trunc_normal_` drew it for every run evaluated so far; drawn here, every torch release
    gives these values (2.11's `trunc_normal_` maps uniforms through the normal quantile, other
    values), so that a run scores the same everywhere. Drawn once per model: its host syncs cost
    nothing. Under the meta device (counting parameters) nothing is drawn."""
    state = torch.empty(length, d)
    if state.is_meta:
        return state
    generator = torch.Generator().manual_seed(seed)
    bound = torch.tensor(STATE_CLIP * std, dtype=torch.float32).item()  # as float32 rounds it
    values = torch.empty(length, d, device="cpu").normal_(0.0, std, generator=generator)
    while bool((outside := (values < -bound) | (values > bound)).any()):
        redrawn = torch.empty_like(values).normal_(0.0, std, generator=generator)
        values = torch.where(outside, redrawn, values)
    return values.to(state.device)


class LoopedTransformer(LoopedLM):
    eval_state: torch.Tensor

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.vocab_size = config.vocab_size
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.prelude = nn.ModuleList(Block(config) for _ in range(config.n_prelude))
        self.adapter = nn.Linear(2 * d, d, bias=False) if config.injection == "concat" else None
        self.core = nn.ModuleList(Block(config) for _ in range(config.n_core))
        # The norm between the recurrence and the coda (model.coda_norm).
        self.core_norm = RMSNorm(d) if config.coda_norm else nn.Identity()
        self.coda = nn.ModuleList(Block(config) for _ in range(config.n_coda))
        self.out_norm = RMSNorm(d)
        self.head = nn.Linear(d, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        self.rotary = RotaryEmbedding(config.head_dim, config.max_seq_len, config.rope_base)
        # The evaluation initial state: one fixed draw per position, so that the same tokens give
        # the same NLL every time and cached decoding sees the same state as a full forward.
        self.state_std = math.sqrt(2 / (5 * d))
        eval_state = evaluation_state(config.max_seq_len, d, self.state_std, config.eval_seed)
        self.register_buffer("eval_state", eval_state, persistent=False)
        self.loop_compiled = False
        """Set by `compile_loop`: cache-less iterations run compiled."""
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2 style: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers)."""
        n_layers = self.config.n_prelude + self.config.n_core + self.config.n_coda
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            std = 0.02
            if name.endswith(("attn.out.weight", "mlp.down.weight")):
                std /= math.sqrt(2 * n_layers)
            nn.init.normal_(p, mean=0.0, std=std)

    # -- the pieces of a forward: what decoding rules and analyses compose ---------------------
    # A forward is encode, initial_state, injection, `depth` times iterate, readout. Decoding
    # rules that stop or branch between iterations (serve/adaptive.py, serve/speculative.py)
    # call these pieces themselves; `cache` names the layer applications (model/kv_cache.py).

    def encode(self, tokens: torch.Tensor, cache: LayerCaches | None = None) -> torch.Tensor:
        """Token ids (B, T) -> the prelude's output e (B, T, d): the embedding and the untied
        prelude blocks, run once per forward whatever the depth."""
        x = self.embed(tokens)
        for i, block in enumerate(self.prelude):
            x = block(x, self.rotary, cache.layer("prelude", i) if cache is not None else None)
        return x

    def initial_state(
        self,
        e: torch.Tensor,
        start: int,
        deterministic: bool,
        state_seeds: Sequence[int] | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The recurrence's state s_0 for the prelude output e of positions start..start+T-1:
        zeros, the fixed evaluation draw (`deterministic`, so the same tokens always score the
        same), or a random draw (training; per row from `state_seeds` when given).

        positions: (B, T) each row's own positions in a padded batch (model/kv_cache.py);
        the evaluation state is drawn per position, so a row starts from what it would alone."""
        if self.config.state_init == "zeros":
            return torch.zeros_like(e)
        if deterministic:
            if positions is not None:
                return self.eval_state[positions].to(e.dtype)
            T = e.shape[1]
            return self.eval_state[start : start + T].to(e.dtype).expand_as(e)
        if state_seeds is None:  # the global RNG
            return truncated_normal(e.shape, self.state_std, e.device).to(e.dtype)
        if len(state_seeds) != e.shape[0]:
            raise ValueError(f"{len(state_seeds)} state seeds for a batch of {e.shape[0]} rows")
        # Drawn in float32 whatever the compute dtype, so that a row's state is the same under
        # fp32, autocast and FSDP's bf16 parameters up to the final rounding.
        rows = [
            truncated_normal(
                e.shape[1:],
                self.state_std,
                e.device,
                torch.Generator(device=e.device).manual_seed(seed),
            )
            for seed in state_seeds
        ]
        return torch.stack(rows).to(e.dtype)

    def injection(self, e: torch.Tensor) -> torch.Tensor:
        """What every iteration adds from the prelude output e, computed once per forward: the
        prelude half of the adapter W_e e (`concat`), or e itself (`add`)."""
        if self.adapter is None:
            return e
        return F.linear(e, self.adapter.weight[:, self.config.d_model :])

    def iterate(
        self,
        state: torch.Tensor,
        injection: torch.Tensor,
        index: int,
        cache: LayerCaches | None = None,
    ) -> torch.Tensor:
        """One iteration s_k = core(W_s s_{k-1} + W_e e) (`concat`; s + e for `add`), given
        `injection` = `injection(e)`; `index` is k - 1, which names the iteration's cache
        entries (each iteration keeps its own keys and values). After `compile_loop`, an
        iteration without a cache runs as one compiled graph."""
        if cache is None and self.loop_compiled:
            return compiled_iteration()(self, state, injection)
        return self.iterate_eager(state, injection, index, cache)

    def iterate_eager(
        self,
        state: torch.Tensor,
        injection: torch.Tensor,
        index: int = 0,
        cache: LayerCaches | None = None,
    ) -> torch.Tensor:
        """`iterate` as PyTorch runs it op by op (what `compile_loop` compiles)."""
        if self.adapter is None:
            x = state + injection
        else:
            state_half = self.adapter.weight[:, : self.config.d_model]
            x = torch.addmm(injection.flatten(0, -2), state.flatten(0, -2), state_half.t())
            x = x.view_as(state)
        for i, block in enumerate(self.core):
            x = block(x, self.rotary, cache.layer("core", index, i) if cache is not None else None)
        return x

    def readout(
        self,
        state: torch.Tensor,
        cache: LayerCaches | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits from a state; at `positions` (B, P) only, when given: the coda still runs on
        every position (its attention reads them all), the final norm and head only there."""
        x = self.core_norm(state)
        for i, block in enumerate(self.coda):
            x = block(x, self.rotary, cache.layer("coda", i) if cache is not None else None)
        if positions is not None:
            x = x.gather(1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        return self.head(self.out_norm(x))

    def once_per_forward(self) -> list[nn.Module]:
        """The prelude and coda blocks (the adapter and the core run at every iteration)."""
        return [*self.prelude, *self.coda]

    def compile_loop(self) -> None:
        """torch.compile in place what a training or evaluation forward runs: each prelude and
        coda block, and a core iteration (the injection's matmul-add and every core block) as
        one graph, each whole (`fullgraph`: a graph break is an error, not a silent split).
        The depth loop stays in Python, so no depth recompiles; the trainer builds every graph
        a run needs before step 0 (train/warm_up.py); decoding with a cache stays eager.
        Parameter names, and so checkpoints, are unchanged."""
        for block in (*self.prelude, *self.coda):
            block.compile(fullgraph=True)
        self.loop_compiled = True

    # -- whole forwards, evaluation and decoding ----------------------------------------------

    def forward(
        self,
        tokens: torch.Tensor,
        depth: int,
        grad_depth: int | None = None,
        state_seeds: Sequence[int] | None = None,
        checkpoint: bool = False,
    ) -> torch.Tensor:
        """Logits (B, T, vocab) after `depth` core iterations.

        grad_depth: truncated backprop (Huginn): only the last `grad_depth` iterations carry
        gradients; the earlier ones run under no_grad. None means full backprop.
        state_seeds: in training, one seed per batch row: row i's random initial state is drawn
        from a generator seeded with state_seeds[i] instead of the global RNG, so that a row's
        noise does not depend on which process or micro-batch it lands in (the trainer derives
        the seeds from the run seed, the step and the row's index in the global batch).
        checkpoint: activation checkpointing per iteration: keep only each iteration's input
        state for the backward and recompute the iteration's inside from it, so that memory
        grows with depth by one (B, T, d) state per iteration instead of every activation of
        the core (docs/design.md §1); costs one more forward of the core per iteration.
        """
        check_depth(depth)
        e = self.encode(tokens)
        state = self.initial_state(e, 0, not self.training, state_seeds)
        injection = self.injection(e)
        n_free = 0 if grad_depth is None else max(0, depth - grad_depth)
        if n_free:
            with torch.no_grad():
                for i in range(n_free):
                    state = self.iterate(state, injection, i)
        recompute = checkpoint and torch.is_grad_enabled()
        for i in range(n_free, depth):
            if recompute:
                # No randomness inside an iteration, so no RNG state to save and restore.
                state = checkpoint_call(
                    self.iterate,
                    state,
                    injection,
                    i,
                    use_reentrant=False,
                    preserve_rng_state=False,
                )
            else:
                state = self.iterate(state, injection, i)
        return self.readout(state)

    @torch.no_grad()
    def logits_by_depth(
        self,
        tokens: torch.Tensor,
        depths: Iterable[int],
        positions: torch.Tensor | None = None,
        after: PrefixRows | None = None,
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (depth, logits) for every requested depth, ascending, from ONE pass of the core.

        Cost: prelude + max(depths) core iterations + len(depths) readouts, instead of the sum
        over depths of separate forwards. Uses the evaluation initial state, so the logits equal
        those of `forward(tokens, depth)` in eval mode.

        positions: (B, P) indices into the sequence; the logits are then (B, P, vocab), those
        of `forward(tokens, depth)` at these positions, and each readout applies the head (with
        a large vocabulary, most of a readout) to P positions per row instead of T.

        after: `tokens` continue a shared prefix (`prefill_shared(...).rows(groups)`, prefilled
        to at least the deepest of `depths` with readouts at all of them): row b is then scored
        as the prefix of its group followed by tokens[b], and positions index `tokens`.
        """
        wanted = sorted({check_depth(d) for d in depths})
        if not wanted:
            raise UserError("logits_by_depth needs at least one depth")
        start = 0 if after is None else after.length
        e = self.encode(tokens, after)
        state = self.initial_state(e, start, deterministic=True)
        injection = self.injection(e)
        targets = set(wanted)
        for i in range(wanted[-1]):
            state = self.iterate(state, injection, i, after)
            if i + 1 in targets:
                coda = None if after is None else AtDepth(after, i + 1)
                yield i + 1, self.readout(state, coda, positions)

    @torch.no_grad()
    def prefill_shared(self, prefix: torch.Tensor, depths: Iterable[int]) -> SharedPrefix:
        """Run prefixes (G, L) once, for continuations scored by `logits_by_depth(...,
        after=shared.rows(groups))` at any of `depths` (model/shared_prefix.py)."""
        wanted = sorted({check_depth(d) for d in depths})
        if not wanted or prefix.dim() != 2 or prefix.shape[1] == 0:
            raise UserError("prefill_shared needs (groups, length >= 1) prefixes and a depth")
        cache = KVCache()
        e = self.encode(prefix, cache)
        state = self.initial_state(e, 0, deterministic=True)
        injection = self.injection(e)
        for i in range(wanted[-1]):
            state = self.iterate(state, injection, i, cache)
            if i + 1 in wanted:  # the coda's keys at this depth; its logits are not needed
                self.readout(
                    state, AtDepth(cache, i + 1), positions=prefix.new_zeros(len(prefix), 0)
                )
        return SharedPrefix(cache, prefix.shape[1], len(prefix))

    def nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> dict[int, float]:
        """Mean next-token NLL (nats) at each requested depth, from one pass of the recurrence
        (targets of IGNORE_INDEX are not scored)."""
        depths = list(depths)
        losses = {
            depth: next_token_loss(logits, targets).item()
            for depth, logits in self.logits_by_depth(tokens, depths)
        }
        return {d: losses[d] for d in depths}

    def row_nll_by_depth(
        self, tokens: torch.Tensor, targets: torch.Tensor, depths: Iterable[int]
    ) -> tuple[dict[int, float], dict[int, torch.Tensor]]:
        """`nll_by_depth`'s means, and each row's summed next-token NLL (B,) at each depth, from
        the same pass: what an interval over held-out rows needs."""
        depths = list(depths)
        means, rows = {}, {}
        for depth, logits in self.logits_by_depth(tokens, depths):
            means[depth] = next_token_loss(logits, targets).item()
            per_token = next_token_loss(logits, targets, reduction="none")
            rows[depth] = per_token.view(targets.shape).sum(dim=1)
        return {d: means[d] for d in depths}, {d: rows[d] for d in depths}

    # -- serving (model/serving.py): decoding steps through a cache, at any depth -------------

    readout_between_passes: str | None = None
    """Our model reads out after any iteration (`readout`): exit rules may stop between them."""

    @property
    def max_seq_len(self) -> int:
        return self.config.max_seq_len

    def new_cache(
        self,
        max_depth: int | None = None,
        pad: torch.Tensor | None = None,
        strategy: CacheStrategy = FULL_CACHE,
        rollback: bool = False,
    ) -> KVCache:
        """A cache for steps at depths up to `max_depth` (None: the first step's), of a batch
        left-padded by `pad`, keeping the core entries `strategy` says; it always rolls back."""
        return KVCache(pad, strategy, max_depth)

    @torch.no_grad()
    def decode_step(self, tokens: torch.Tensor, depth: int, cache: KVCache) -> torch.Tensor:
        """Process the next tokens (B, T) after what `cache` holds at `depth`; return their
        logits. Below the depth the cache was built for, each token shows later, deeper tokens
        its last iteration's entries at the iterations it did not run (docs/design.md §1)."""
        check_depth(depth)
        built = cache.build_for(depth)
        start = cache.length
        positions = cache.positions(tokens.shape[1])
        e = self.encode(tokens, cache)
        state = self.initial_state(e, start, deterministic=True, positions=positions)
        injection = self.injection(e)
        for i in range(depth):
            state = self.iterate(state, injection, i, cache)
        logits = self.readout(state, cache)
        if depth < built:
            ran = torch.full((tokens.shape[0],), depth, device=tokens.device)
            cache.fill_unreached_slots(ran, start, built, self.config.n_core)
        cache.length += tokens.shape[1]
        return logits

    @torch.no_grad()
    def stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        depth: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        pad: torch.Tensor | None = None,
        cache_strategy: CacheStrategy = FULL_CACHE,
    ) -> Iterator[torch.Tensor]:
        """Yield the next token (B, 1) one at a time, decoding with a KV cache that keeps the
        core entries `cache_strategy` says (model/kv_cache.py; the prompt in one pass).

        pad: (B,) leading pad columns of each row of a left-padded prompt: row b then decodes
        as prompt[b, pad[b]:] would alone (its own positions, padding masked out)."""
        check_depth(depth)
        if prompt.dim() != 2 or prompt.shape[1] == 0:
            raise UserError("prompt must be a (batch, length) tensor with length >= 1")
        total = prompt.shape[1] + max_new_tokens
        if total > self.config.max_seq_len:
            raise UserError(
                f"prompt + new tokens = {total} exceeds model.max_seq_len = "
                f"{self.config.max_seq_len}"
            )
        cache = KVCache(pad, cache_strategy)
        logits = self.decode_step(prompt, depth, cache)
        for n in range(max_new_tokens):
            token = sample_next(logits[:, -1], temperature, generator)
            yield token
            if n + 1 < max_new_tokens:
                logits = self.decode_step(token, depth, cache)

    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        depth: int,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
        pad: torch.Tensor | None = None,
        cache_strategy: CacheStrategy = FULL_CACHE,
    ) -> torch.Tensor:
        """prompt (B, T) -> (B, T + max_new_tokens). temperature 0 is greedy (argmax)."""
        new = list(
            self.stream(prompt, max_new_tokens, depth, temperature, generator, pad, cache_strategy)
        )
        return torch.cat([prompt, *new], dim=1)

    def parameter_counts(self) -> dict[str, int]:
        """Parameters per part; a tied head counts under `embedding` only. Independent of depth."""
        groups: dict[str, list[nn.Module]] = {
            "embedding": [self.embed],
            "prelude": [self.prelude],
            "core": [m for m in (self.adapter, self.core) if m is not None],
            "coda": [self.core_norm, self.coda, self.out_norm],
            "head": [self.head],
        }
        seen: set[int] = set()
        counts: dict[str, int] = {}
        for name, modules in groups.items():
            n = 0
            for module in modules:
                for p in module.parameters():
                    if id(p) not in seen:
                        seen.add(id(p))
                        n += p.numel()
            counts[name] = n
        counts["total"] = sum(counts.values())
        return counts


@functools.cache
def compiled_iteration() -> Callable[..., torch.Tensor]:
    """One compiled `iterate_eager` for every model of the process: the model is an argument,
    so a copy of a compiled model runs its own weights (dynamo guards on their shapes)."""
    return torch.compile(LoopedTransformer.iterate_eager, fullgraph=True)


def sample_next(
    logits: torch.Tensor, temperature: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(B, V) logits -> (B, 1) tokens: argmax at temperature 0, else a softmax sample."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)
