"""Upper bounds on values whose cost grows without limit, and the ranges the libraries under
us accept. Each is far beyond any real use, so it only ever refuses a slip of the keyboard
(an extra zero or three) in one line, before a command starts something that would run for
hours or fail deep inside torch or numpy with a traceback.
"""

from __future__ import annotations

MAX_DEPTH = 1024
"""The most core iterations any command runs (training, evaluation, generation, the compute
model). Cost is linear in depth; the paper's deepest serving depth is 64."""

MAX_STEPS = 1_000_000
"""The most optimizer steps a run may plan: every step's depth is drawn before the run starts
(about 12 us a step), and the paper's largest run takes 38,146."""

MAX_SEED = 2**63 - 1
"""Seeds are in [0, MAX_SEED]: numpy refuses negative seeds, torch anything past 64 bits."""

MAX_WIDTH = 1 << 20
"""model.d_model, model.d_ff: a width beyond a million is a typo, and would overflow the
shape arithmetic of a weight matrix long before memory runs out."""

MAX_LAYERS = 1024
"""model.n_prelude, n_core, n_coda."""

MAX_VOCAB = 1 << 32
"""model.vocab_size: token shards hold at most uint32 ids."""

MAX_SEQ_LEN = 1 << 20
"""model.max_seq_len (rotary tables are max_seq_len x head_dim)."""

MAX_BATCH = 1 << 20
"""train.batch_size, eval.batches and similar counts of sequences or batches."""
