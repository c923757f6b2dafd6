"""The `fixedfirst` model of lm-evaluation-harness: a run (or an export) at one serving depth, of
fixedfirst's own looped transformer or of a transformers looped architecture (model/serving.py).

    --model fixedfirst --model_args run=RUN[,depth=K][,checkpoint=STEP][,exit=kl,threshold=T,
                                    max_depth=K][,cache=full|bounded:S|last][,seed=S]
                                    [,max_gen_toks=N]

`depth` defaults to the deepest the run trained at; `exit=kl` serves with per-token KL exit
instead, as does a `cache` that does not keep every iteration (docs/design.md §19). How each kind
of harness request is answered is in docs/design.md §18.
"""

from __future__ import annotations

import dataclasses
import logging

import lm_eval.models  # noqa: F401  (the built-in names first: see fixedfirst.harness.register)
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from fixedfirst.errors import UserError
from fixedfirst.harness import MODEL_NAME
from fixedfirst.model import parse_cache_strategy
from fixedfirst.model.serving import with_readout_per_pass
from fixedfirst.runs.served import load_served
from fixedfirst.serve.adaptive import DEFAULT_THRESHOLD, KLExit
from fixedfirst.serve.decoding import decode_steps
from fixedfirst.serve.modes import Adaptive, FixedDepth, Sampling
from fixedfirst.serve.scoring import Pair, rolling_pairs, score_pairs

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 16
DEFAULT_MAX_GEN_TOKS = 256


@register_model(MODEL_NAME)
class FixedFirstLM(LM):
    def __init__(
        self,
        run: str,
        depth: int | None = None,
        checkpoint: int | None = None,
        exit: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        max_depth: int | None = None,
        batch_size: int | str | None = DEFAULT_BATCH_SIZE,
        max_batch_size: int | None = None,
        device: str | None = None,
        seed: int = 1234,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        cache: str = "full",
    ) -> None:
        super().__init__()
        if exit not in (None, "kl"):
            raise UserError(f"exit={exit!r}: the only exit rule is 'kl'")
        if exit is None and max_depth is not None:
            raise UserError("max_depth goes with exit=kl")
        if exit is not None and depth is not None:
            raise UserError("give either depth=K or exit=kl, not both")
        strategy = parse_cache_strategy(cache, "cache=")
        self.served = load_served(run, checkpoint, _device(device))
        self.model = self.served.model
        tokenizer = self.served.tokenizer
        assert tokenizer is not None
        self.tokenizer = tokenizer
        self.mode: FixedDepth | Adaptive
        if exit == "kl":
            rule = KLExit(threshold, max_depth or self.served.default_depth)
            self.mode = Adaptive(rule, cache_strategy=strategy)
            with_readout_per_pass(self.model, f"exit=kl ({self.mode.describe()})")
        else:
            depth = depth if depth is not None else self.served.default_depth
            self.mode = FixedDepth(depth, cache_strategy=strategy)
        self.batch_size = batch_size if isinstance(batch_size, int) else DEFAULT_BATCH_SIZE
        self.max_gen_toks = max_gen_toks
        self.seed = seed
        self._device = next(self.model.parameters()).device

    def set_depth(self, depth: int) -> None:
        """Serve at another fixed depth (`fixedfirst downstream` reuses one model for all)."""
        self.mode = FixedDepth(depth, cache_strategy=self.mode.cache_strategy)

    def get_model_info(self) -> dict:
        serving = self.mode.describe()
        return {"model_source": self.served.description, "serving": serving}

    # -- tokenization ------------------------------------------------------------------------

    def _encode_pair(self, context: str, continuation: str) -> Pair:
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        context_ids = self.tokenizer.encode(context)
        whole = self.tokenizer.encode(context + continuation)
        if whole[: len(context_ids)] == context_ids:
            continuation_ids = whole[len(context_ids) :]
        else:  # a merge across the boundary: tokenize the two sides apart
            continuation_ids = self.tokenizer.encode(continuation)
        return [self.tokenizer.start_id, *context_ids], continuation_ids

    # -- the three request types -------------------------------------------------------------

    def loglikelihood(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        pairs = [self._encode_pair(*request.args) for request in requests]
        results = score_pairs(self.model, pairs, self.mode, self.batch_size)
        for request, result in zip(requests, results, strict=True):
            self.cache_hook.add_partial("loglikelihood", request.args, result)
        return results

    def loglikelihood_rolling(
        self, requests: list[Instance], disable_tqdm: bool = False
    ) -> list[float]:
        window = self.model.max_seq_len
        results = []
        for request in tqdm(requests, disable=disable_tqdm or self.rank != 0):
            (text,) = request.args
            ids = [self.tokenizer.start_id, *self.tokenizer.encode(text)]
            pairs = rolling_pairs(ids, window)
            scores = score_pairs(self.model, pairs, self.mode, self.batch_size)
            total = sum(logprob for logprob, _ in scores)
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
            results.append(total)
        return results

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        results = []
        for request in tqdm(requests, disable=disable_tqdm or self.rank != 0):
            context, gen_kwargs = request.args
            text = self._generate(context, dict(gen_kwargs))
            self.cache_hook.add_partial("generate_until", request.args, text)
            results.append(text)
        return results

    @torch.no_grad()
    def _generate(self, context: str, gen_kwargs: dict) -> str:
        until = gen_kwargs.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = int(gen_kwargs.pop("max_gen_toks", self.max_gen_toks))
        temperature = float(gen_kwargs.pop("temperature", 0.0) or 0.0)
        if not gen_kwargs.pop("do_sample", False):
            temperature = 0.0
        window = self.model.max_seq_len
        max_new = max(1, min(max_new, window - 1))
        ids = [self.tokenizer.start_id, *self.tokenizer.encode(context)]
        ids = ids[-(window - max_new) :]  # keep the end of a context too long for the window
        prompt = torch.tensor([ids], device=self._device)
        mode = dataclasses.replace(self.mode, sampling=Sampling(temperature, self.seed))
        tokens = (token for token, _ in decode_steps(self.model, prompt, max_new, mode))
        generated: list[int] = []
        text = ""
        for token in tokens:
            token_id = int(token[0, 0])
            if token_id == self.tokenizer.stop_id:
                break
            generated.append(token_id)
            text = self.tokenizer.decode(generated)
            cut = min((text.find(s) for s in until if s and s in text), default=-1)
            if cut >= 0:
                return text[:cut]
        return text


def _device(name: str | None) -> torch.device:
    """The harness passes `cuda:0` by default; serve on the CPU when there is no CUDA."""
    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.warning("device %s requested but CUDA is not available: using the CPU", name)
        return torch.device("cpu")
    return device
