"""``nmref permute``: a tiny random LLaMA-style model computes the same function after it.

The model is built here with NumPy (two decoder layers, grouped-query attention, biases on
some projections) and evaluated in float64 before and after; the permutation only reorders
sums, so the outputs agree to 1e-10 relative (``specs/permutation.md``, P10).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nmref.cli import main
from nmref.io.checkpoints import iter_tensors, write_tensors
from nmref.permutation import permutation_objective

pytest.importorskip("safetensors")

CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
}


def random_llama(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hidden, inner, heads, kv, dim = 16, 32, 4, 2, 8

    def weight(*shape: int) -> np.ndarray:
        return (0.25 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": weight(50, hidden),
        "lm_head.weight": weight(50, hidden),
    }
    for i in range(2):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = weight(heads * dim, hidden)
        tensors[p + "self_attn.k_proj.weight"] = weight(kv * dim, hidden)
        tensors[p + "self_attn.v_proj.weight"] = weight(kv * dim, hidden)
        tensors[p + "self_attn.o_proj.weight"] = weight(hidden, heads * dim)
        tensors[p + "mlp.gate_proj.weight"] = weight(inner, hidden)
        tensors[p + "mlp.up_proj.weight"] = weight(inner, hidden)
        tensors[p + "mlp.down_proj.weight"] = weight(hidden, inner)
        tensors[p + "input_layernorm.weight"] = 1 + 0.1 * weight(hidden)
    # Biases where some models have them (Qwen2: q/k/v): they must move with their rows.
    tensors["model.layers.1.self_attn.v_proj.bias"] = weight(kv * dim)
    tensors["model.layers.1.mlp.gate_proj.bias"] = weight(inner)
    tensors["model.layers.1.mlp.up_proj.bias"] = weight(inner)
    return tensors


def forward(tensors: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The decoder stack in float64: RMSNorm, causal GQA attention, SiLU-gated MLP."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    heads, kv, dim = 4, 2, 8
    steps = x.shape[0]
    causal = np.triu(np.full((steps, steps), -np.inf), 1)

    def linear(name: str, value: np.ndarray) -> np.ndarray:
        out = value @ t[name + ".weight"].T
        return out + t[name + ".bias"] if name + ".bias" in t else out

    for i in range(2):
        p = f"model.layers.{i}."
        normed = x / np.sqrt((x**2).mean(axis=1, keepdims=True) + 1e-6)
        normed = normed * t[p + "input_layernorm.weight"]
        q = linear(p + "self_attn.q_proj", normed).reshape(steps, heads, dim)
        k = linear(p + "self_attn.k_proj", normed).reshape(steps, kv, dim)
        v = linear(p + "self_attn.v_proj", normed).reshape(steps, kv, dim)
        outputs = []
        for h in range(heads):
            g = h // (heads // kv)
            scores = q[:, h] @ k[:, g].T / np.sqrt(dim) + causal
            weights = np.exp(scores - scores.max(axis=1, keepdims=True))
            outputs.append((weights / weights.sum(axis=1, keepdims=True)) @ v[:, g])
        x = x + linear(p + "self_attn.o_proj", np.concatenate(outputs, axis=1))
        gate = linear(p + "mlp.gate_proj", x)
        x = x + linear(
            p + "mlp.down_proj", gate / (1 + np.exp(-gate)) * linear(p + "mlp.up_proj", x)
        )
    return x


def model_folder(root: Path, tensors: dict[str, np.ndarray], config: dict) -> Path:
    folder = root / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    write_tensors(folder / "model.safetensors", tensors)
    return folder


def test_permuted_llama_computes_the_same_function_and_keeps_more(tmp_path, capsys):
    tensors = random_llama()
    folder = model_folder(tmp_path, tensors, CONFIG)
    out = tmp_path / "permuted.safetensors"
    assert main(["permute", str(folder), "--pattern", "2:4", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    permuted = {r.name: r.array for r in iter_tensors(out)}
    assert permuted.keys() == tensors.keys()
    x = np.random.default_rng(1).standard_normal((5, 16))
    before, after = forward(tensors, x), forward(permuted, x)
    np.testing.assert_allclose(after, before, rtol=1e-10, atol=1e-10)
    gained = 0
    for i in range(2):
        for name in (
            f"model.layers.{i}.mlp.down_proj.weight",
            f"model.layers.{i}.self_attn.o_proj.weight",
        ):
            old = permutation_objective(tensors[name], 2, 4)
            new = permutation_objective(permuted[name], 2, 4)
            assert new >= old
            gained += new > old
            assert name in printed
    assert gained >= 3  # the search really moved channels (else this test proves nothing)
    # Weights were moved, never changed: the same multiset of values.
    for name, array in tensors.items():
        np.testing.assert_array_equal(np.sort(permuted[name], axis=None), np.sort(array, axis=None))
    assert "not permuted: 'model.layers.0.self_attn.q_proj.weight'" in printed
    assert "not permuted: 'lm_head.weight'" in printed


def test_the_head_rule_keeps_channels_inside_their_value_head(tmp_path):
    tensors = random_llama(3)
    folder = model_folder(tmp_path, tensors, CONFIG)
    out = tmp_path / "permuted.safetensors"
    assert (
        main(["permute", str(folder), "--pattern", "1:4", "-o", str(out), "--method", "swaps"]) == 0
    )
    permuted = {r.name: r.array for r in iter_tensors(out)}
    v_old = tensors["model.layers.0.self_attn.v_proj.weight"]
    v_new = permuted["model.layers.0.self_attn.v_proj.weight"]
    for g in range(2):
        rows = {tuple(row) for row in v_old[g * 8 : (g + 1) * 8]}
        assert {tuple(row) for row in v_new[g * 8 : (g + 1) * 8]} == rows


def test_unknown_pairing_is_reported_per_tensor_and_nothing_moves(tmp_path, capsys):
    tensors = random_llama()
    folder = model_folder(tmp_path, tensors, {**CONFIG, "model_type": "bert"})
    out = tmp_path / "same.safetensors"
    assert main(["permute", str(folder), "--pattern", "2:4", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    for name, array in tensors.items():
        if array.ndim >= 2:
            assert f"not permuted: {name!r}: pairing unknown for model_type 'bert'" in printed
    for record in iter_tensors(out):
        np.testing.assert_array_equal(record.array, tensors[record.name])


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda folder: (folder / "config.json").unlink(), "has no config.json"),
        (lambda folder: (folder / "config.json").write_text("{"), "is not valid JSON"),
        (lambda folder: (folder / "config.json").write_text(json.dumps({**CONFIG, "head_dim": 6})),
         "needs 4 x 6 = 24 input channels"),
    ],
)  # fmt: skip
def test_bad_models_are_one_line_exit_2(tmp_path, capsys, setup, message):
    folder = model_folder(tmp_path, random_llama(), CONFIG)
    setup(folder)
    out = tmp_path / "out.safetensors"
    assert main(["permute", str(folder), "--pattern", "2:4", "-o", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("nmref: error:") and message in error
    assert not out.exists()


def test_existing_output_needs_force(tmp_path, capsys):
    folder = model_folder(tmp_path, random_llama(), CONFIG)
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"old")
    assert main(["permute", str(folder), "--pattern", "2:4", "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_bytes() == b"old"
    assert main(["permute", str(folder), "--pattern", "2:4", "-o", str(out), "--force"]) == 0
