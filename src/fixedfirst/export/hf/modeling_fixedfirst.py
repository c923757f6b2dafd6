"""A fixedfirst looped transformer as a Hugging Face `transformers` model.

`fixedfirst export RUN --out DIR --format hf` copies this file into DIR, so that
`AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)` loads the model with torch
and transformers (>= 5) alone: the file does not import fixedfirst, and DIR can be published as
it is. It is written from the math of fixedfirst's docs/design.md §1; §9 there says how it
serves depths, caches and the initial state, and §19 what `cache_slots` = S (fixedfirst's
`--cache bounded:S`; config.json or per call) keeps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

# transformers renamed the cache field of model outputs from `past_key_values` to `cache` in 5.x.
_CACHE_FIELD = (
    "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
)
# Keyword arguments that generation or evaluation tools pass and that change nothing here.
_IGNORED = {"cache_position", "logits_to_keep", "num_logits_to_keep", "next_sequence_length"}


class FixedFirstConfig(PretrainedConfig):
    """The looped transformer's shape, in fixedfirst's [model] terms, plus the serving depth."""

    model_type = "fixedfirst"

    def __init__(
        self,
        vocab_size=256,
        hidden_size=128,
        num_attention_heads=4,
        n_prelude=1,
        n_core=2,
        n_coda=1,
        max_position_embeddings=256,
        intermediate_size=None,
        mlp="swiglu",
        norm="pre",
        injection="concat",
        state_init="normal",
        eval_seed=0,
        coda_norm=True,
        rope_base=10000.0,
        depth=1,
        cache_slots=None,
        use_cache=True,
        tie_word_embeddings=False,
        **kwargs,
    ):
        if intermediate_size is None:  # fixedfirst's default MLP width
            gelu = 4 * hidden_size
            intermediate_size = gelu if mlp == "gelu" else 64 * math.ceil(8 * hidden_size / 192)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads
        self.head_dim = hidden_size // num_attention_heads
        self.n_prelude = n_prelude
        self.n_core = n_core
        self.n_coda = n_coda
        self.num_hidden_layers = n_prelude + n_core + n_coda  # distinct layers, not applications
        self.max_position_embeddings = max_position_embeddings
        self.intermediate_size = intermediate_size
        self.mlp = mlp
        self.norm = norm
        self.injection = injection
        self.state_init = state_init
        self.eval_seed = eval_seed
        self.coda_norm = coda_norm
        self.rope_base = rope_base
        self.depth = depth
        self.cache_slots = _check_cache_slots(cache_slots)
        self.use_cache = use_cache
        # transformers 5 types PreTrainedConfig's __init__ by its own fields only; at run time it
        # takes the shared keys (tie_word_embeddings) and passes others through
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)  # type: ignore[call-arg]


MAX_DEPTH = 1024
"""fixedfirst's cap on core iterations (config/limits.py; a test holds the two equal): the cost
grows linearly with depth, so a slip in config.json or a call would run for minutes."""


def _check_depth(depth):
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    if depth > MAX_DEPTH:
        raise ValueError(
            f"depth must be <= MAX_DEPTH = {MAX_DEPTH} (the cost grows linearly with depth), "
            f"got {depth}"
        )
    return depth


def _check_cache_slots(slots):
    """None (the full cache) or the number S >= 1 of core slots per layer."""
    if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or slots < 1):
        raise ValueError(
            f"cache_slots must be None (the full cache) or an integer >= 1 (S slots per core "
            f"layer; 1 keeps the last iteration only), got {slots!r}"
        )
    return slots


class RMSNorm(nn.Module):
    """x / rms(x) * weight, in float32 whatever the compute dtype."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).type_as(x)


def _rotate(x, cos, sin):
    """Rotary embedding on interleaved pairs (x[0::2], x[1::2]) of (B, H, T, head_dim)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x, rope, mask, cache, layer_idx):
        B, T, D = x.shape
        q, k, v = (
            t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2)
            for t in self.qkv(x).split(D, dim=-1)
        )
        q, k = _rotate(q, *rope), _rotate(k, *rope)
        if cache is not None:
            k, v = cache.update(k, v, layer_idx)
        if isinstance(mask, str):  # "causal": no cache before these tokens, no padding
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # None: one new token, which sees every cached one; else an explicit mask
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gated = config.mlp == "swiglu"
        hidden = config.intermediate_size
        self.up = nn.Linear(config.hidden_size, (2 if self.gated else 1) * hidden, bias=False)
        self.down = nn.Linear(hidden, config.hidden_size, bias=False)

    def forward(self, x):
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        else:
            h = F.gelu(h)
        return self.down(h)


class Block(nn.Module):
    """Pre-norm attention and MLP residual branches (`norm = "sandwich"`: each sum normalised)."""

    def __init__(self, config):
        super().__init__()
        self.attn_norm = RMSNorm(config.hidden_size)
        self.attn = Attention(config)
        self.mlp_norm = RMSNorm(config.hidden_size)
        self.mlp = MLP(config)
        self.sandwich = config.norm == "sandwich"
        if self.sandwich:
            self.attn_post_norm = RMSNorm(config.hidden_size)
            self.mlp_post_norm = RMSNorm(config.hidden_size)

    def forward(self, x, rope, mask, cache, layer_idx):
        x = x + self.attn(self.attn_norm(x), rope, mask, cache, layer_idx)
        if self.sandwich:
            x = self.attn_post_norm(x)
        x = x + self.mlp(self.mlp_norm(x))
        if self.sandwich:
            x = self.mlp_post_norm(x)
        return x


class FixedFirstPreTrainedModel(PreTrainedModel):
    config_class = FixedFirstConfig
    base_model_prefix = "model"
    _no_split_modules = ["Block"]  # noqa: RUF012 (the type PreTrainedModel declares)
    _supports_sdpa = True

    def _init_weights(self, module):
        super()._init_weights(module)
        state = getattr(module, "eval_state", None)
        if isinstance(state, torch.Tensor) and not getattr(state, "_is_hf_initialized", False):
            with torch.no_grad():
                state.copy_(_eval_state_draw(self.config).to(state.device, state.dtype))


def _eval_state_draw(config):
    """fixedfirst's evaluation state: a truncated normal (std sqrt(2 / (5 d)), cut at 3 std) per
    position, from a generator seeded with eval_seed, drawn by rejection (all values again where
    any lies outside, until none does), so that every torch release gives the same values.
    Exported models carry the drawn tensor in model.safetensors, so this is only used for a
    model built from a config."""
    std = math.sqrt(2 / (5 * config.hidden_size))
    shape = (config.max_position_embeddings, config.hidden_size)
    generator = torch.Generator().manual_seed(config.eval_seed)
    bound = torch.tensor(3 * std, dtype=torch.float32).item()
    state = torch.empty(shape).normal_(0.0, std, generator=generator)
    while bool((outside := (state < -bound) | (state > bound)).any()):
        state = torch.where(
            outside, torch.empty(shape).normal_(0.0, std, generator=generator), state
        )
    return state


class FixedFirstForCausalLM(FixedFirstPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"head.weight": "embed.weight"}  # noqa: RUF012 (transformers reads it)

    def __init__(self, config):
        super().__init__(config)
        d = config.hidden_size
        self.embed = nn.Embedding(config.vocab_size, d)
        self.prelude = nn.ModuleList(Block(config) for _ in range(config.n_prelude))
        self.adapter = nn.Linear(2 * d, d, bias=False) if config.injection == "concat" else None
        self.core = nn.ModuleList(Block(config) for _ in range(config.n_core))
        self.core_norm = RMSNorm(d) if config.coda_norm else nn.Identity()
        self.coda = nn.ModuleList(Block(config) for _ in range(config.n_coda))
        self.out_norm = RMSNorm(d)
        self.head = nn.Linear(d, config.vocab_size, bias=False)
        if config.state_init == "normal":
            self.register_buffer("eval_state", torch.zeros(config.max_position_embeddings, d))
        else:
            self.eval_state = None
        self._rope_tables = {}
        self.post_init()

    def get_input_embeddings(self):
        return self.embed

    def set_input_embeddings(self, value):
        self.embed = value

    def get_output_embeddings(self):
        return self.head

    def set_output_embeddings(self, value):
        self.head = value

    # -- positions, masks, the initial state -------------------------------------------------

    def _rope(self, positions):
        """cos, sin of shape (B, 1, T, head_dim / 2), computed in float64 as fixedfirst does."""
        config = self.config
        if int(positions.max()) >= config.max_position_embeddings:
            raise ValueError(
                f"position {int(positions.max())} is beyond max_position_embeddings = "
                f"{config.max_position_embeddings}"
            )
        device = positions.device
        if device not in self._rope_tables:
            hd = config.head_dim
            exponents = torch.arange(0, hd, 2, dtype=torch.float64) / hd
            inv_freq = 1.0 / config.rope_base**exponents
            steps = torch.arange(config.max_position_embeddings, dtype=torch.float64)
            angles = torch.outer(steps, inv_freq)
            tables = angles.cos().float(), angles.sin().float()
            self._rope_tables[device] = tuple(t.to(device) for t in tables)
        cos, sin = self._rope_tables[device]
        return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)

    @staticmethod
    def _mask(attention_mask, past, T, device):
        """The attention mask of T new tokens after `past` cached ones: "causal" (no cache, no
        padding), None (one token, which sees everything cached) or a boolean (B or 1, 1, T,
        past + T) mask."""
        S = past + T
        if attention_mask is not None:
            if attention_mask.shape[-1] != S:
                raise ValueError(
                    f"attention_mask covers {attention_mask.shape[-1]} positions, the cache and "
                    f"the inputs {S}"
                )
            if not bool(attention_mask.all()):  # padding
                keys = torch.arange(S, device=device)
                queries = torch.arange(past, S, device=device)
                causal = keys[None, :] <= queries[:, None]
                allowed = causal[None] & attention_mask.bool()[:, None, :]
                # A padding position attends to itself, so that no row of the softmax is empty
                # (its output is never read: nothing attends to a padding key).
                allowed = allowed | (keys[None, :] == queries[:, None])[None]
                return allowed[:, None]
        if past == 0:
            return "causal"
        if T == 1:
            return None
        keys = torch.arange(S, device=device)
        queries = torch.arange(past, S, device=device)
        return (keys[None, :] <= queries[:, None])[None, None]

    def _initial_state(self, e, positions):
        if self.eval_state is None:
            return torch.zeros_like(e)
        if self.training:
            std = math.sqrt(2 / (5 * self.config.hidden_size))
            return nn.init.trunc_normal_(torch.empty_like(e), std=std, a=-3 * std, b=3 * std)
        return self.eval_state[positions].to(e.dtype).expand_as(e)

    # -- the forward pass ----------------------------------------------------------------------

    def _iteration(self, state, e, index, rope, mask, cache, slots):
        """One application of the core block with input injection; its keys and values go to
        slot index (full cache) or index mod `slots`, replacing what an earlier iteration of
        this call wrote there."""
        x = state + e if self.adapter is None else self.adapter(torch.cat([state, e], dim=-1))
        slot = index if slots is None else index % slots
        first = self.config.n_prelude + self.config.n_coda + slot * self.config.n_core
        if cache is not None and slot != index:  # the slot holds this call's columns already
            for i in range(self.config.n_core):
                cache.layers[first + i].crop(-x.shape[1])
        for i, block in enumerate(self.core):
            x = block(x, rope, mask, cache, first + i)
        return x

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        cache=None,
        inputs_embeds=None,
        labels=None,
        use_cache=None,
        depth=None,
        cache_slots=None,
        return_dict=None,
        past_key_values=None,
        output_attentions=None,
        output_hidden_states=None,
        **kwargs,
    ):
        """Logits after `depth` core iterations (default config.depth), a DynamicCache when
        use_cache (its core slots bounded by `cache_slots`, default config.cache_slots), and the
        next-token loss when `labels` (shifted inside, -100 not scored; summed
        and divided by `num_items_in_batch` when the transformers Trainer passes it)."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        unknown = sorted(k for k, v in kwargs.items() if k not in _IGNORED and v is not None)
        if unknown:
            raise TypeError(f"FixedFirstForCausalLM.forward got unexpected arguments {unknown}")
        if output_attentions or output_hidden_states:
            raise ValueError("FixedFirstForCausalLM returns neither attentions nor hidden states")
        depth = _check_depth(self.config.depth if depth is None else depth)
        slots = _check_cache_slots(self.config.cache_slots if cache_slots is None else cache_slots)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids and inputs_embeds")
        cache = cache if cache is not None else past_key_values
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None and not self.training:
            cache = DynamicCache()
        if not use_cache:
            cache = None
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        T = x.shape[1]
        past = self._prepare_cache(cache, depth, slots)

        if position_ids is None:
            if attention_mask is not None and not bool(attention_mask.all()):
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)[:, -T:]
            else:
                position_ids = torch.arange(past, past + T, device=x.device)[None]
        positions = position_ids.clamp_min(0)
        rope = self._rope(positions)
        mask = self._mask(attention_mask, past, T, x.device)

        for i, block in enumerate(self.prelude):
            x = block(x, rope, mask, cache, i)
        e = x
        state = self._initial_state(e, positions)
        for k in range(depth):
            state = self._iteration(state, e, k, rope, mask, cache, slots)
        x = self.core_norm(state)
        for i, block in enumerate(self.coda):
            x = block(x, rope, mask, cache, self.config.n_prelude + i)
        logits = self.head(self.out_norm(x))

        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].float().flatten(0, 1),
                labels[:, 1:].to(logits.device).flatten(),
                ignore_index=-100,
                reduction="mean" if num_items_in_batch is None else "sum",
            )
            if num_items_in_batch is not None:
                loss = loss / num_items_in_batch
        output = CausalLMOutputWithPast(loss=loss, logits=logits, **{_CACHE_FIELD: cache})
        return output.to_tuple() if return_dict is False else output

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """transformers' generate, refusing before the first token a length beyond
        max_position_embeddings (positions past it have no rotary angle and no initial state)
        and a depth beyond MAX_DEPTH."""
        ids = inputs if inputs is not None else kwargs.get("input_ids")
        embeds = kwargs.get("inputs_embeds")
        prompt = ids.shape[-1] if ids is not None else embeds.shape[1] if embeds is not None else 1
        config = generation_config if generation_config is not None else self.generation_config
        new = kwargs.get("max_new_tokens", config.max_new_tokens)
        total = prompt + new if new is not None else kwargs.get("max_length", config.max_length)
        limit = self.config.max_position_embeddings
        if total is not None and total > limit:
            raise ValueError(
                f"generating up to {total} positions ({prompt} in the prompt) passes "
                f"max_position_embeddings = {limit}; ask for at most {max(limit - prompt, 0)} "
                "new tokens"
            )
        depth = kwargs.get("depth")
        _check_depth(self.config.depth if depth is None else depth)
        slots = kwargs.get("cache_slots")
        _check_cache_slots(self.config.cache_slots if slots is None else slots)
        return super().generate(inputs, generation_config, **kwargs)

    def _prepare_cache(self, cache, depth, slots):
        """The number of positions the cache holds; give it an entry for every layer application
        of this depth (min(depth, slots) core slots when bounded). A cache continues only at
        the depth and with the slots it was built with: a token's coda entries come from the
        state at that depth, and a slot's entries from the iterations that share it."""
        if cache is None:
            return 0
        if not isinstance(cache, DynamicCache):
            raise ValueError(
                f"FixedFirstForCausalLM needs a DynamicCache (one entry per layer application, so "
                f"their number depends on the depth), got {type(cache).__name__}"
            )
        past = cache.get_seq_length() if len(cache.layers) else 0
        built_at = getattr(cache, "fixedfirst_depth", None)
        if past and built_at is not None and built_at != depth:
            raise ValueError(
                f"this cache was built at depth {built_at}; it cannot be continued at depth "
                f"{depth} (start a new one)"
            )
        built_with = getattr(cache, "fixedfirst_slots", slots)
        if past and built_with != slots:
            raise ValueError(
                f"this cache was built with cache_slots = {built_with}; it cannot be continued "
                f"with cache_slots = {slots} (start a new one)"
            )
        cache.fixedfirst_depth = depth  # type: ignore[attr-defined]  # our mark on transformers' cache
        cache.fixedfirst_slots = slots  # type: ignore[attr-defined]
        config = self.config
        kept = depth if slots is None else min(depth, slots)
        needed = config.n_prelude + config.n_coda + kept * config.n_core
        if getattr(cache, "layer_class_to_replicate", None) is None:
            while len(cache.layers) < needed:
                cache.layers.append(DynamicLayer())
        return past
