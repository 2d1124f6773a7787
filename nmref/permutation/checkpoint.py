"""Channel permutations applied to model checkpoints whose layer pairing is known.

A permutation of the input channels of a consumer weight keeps the network's
function only if the producer of those channels is permuted the same way
(``specs/permutation.md``, P10). The pairing is read from the model's
``config.json``; where it is not known, tensors are reported as such and left
alone -- never guessed.

LLaMA-style models (``model_type`` in :data:`LLAMA_STYLE`), layer ``i``:

* MLP: ``down_proj`` consumes ``act(gate_proj x) * (up_proj x)``. One permutation
  ``p`` of the intermediate channels, searched on ``down_proj``, is applied to the
  columns of ``down_proj`` and the rows (and biases) of ``gate_proj`` and ``up_proj``.
* Attention: ``o_proj`` consumes the concatenated per-head outputs
  ``softmax(q_h k_g^T) v_g`` with ``g`` the key/value head of query head ``h``. A
  channel may move only inside its head, and every query head sharing value head
  ``g`` must move the same way: one permutation per value head, searched on the
  ``o_proj`` columns of all its query heads stacked as rows, applied to those
  columns and to the rows (and bias) of ``v_proj`` in head ``g``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from nmref.patterns import Pattern
from nmref.permutation import (
    ChannelPermutation,
    permutation_objective,
    row_bound,
    search_channel_permutation,
)

__all__ = ["LLAMA_STYLE", "LayerReport", "PermutedModel", "permute_checkpoint"]

#: ``config.json`` model types whose blocks follow the LLaMA naming and wiring.
LLAMA_STYLE = ("llama", "mistral", "qwen2")
_LAYER_NAME = re.compile(r"model\.layers\.([0-9]{1,18})\.")


@dataclass(frozen=True)
class LayerReport:
    """Kept magnitude of one permuted consumer weight, before and after."""

    name: str
    partners: tuple[str, ...]
    kept_before: float
    kept_after: float
    total: float
    efficacy: float


@dataclass(frozen=True)
class PermutedModel:
    tensors: dict[str, NDArray]
    layers: list[LayerReport]
    unknown: list[str]  # weights (ndim >= 2) left alone: pairing unknown


def _config_int(config: Mapping[str, object], key: str, default: int | None = None) -> int:
    value = config.get(key)
    if value is None:  # absent, or null as some configs write it
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: {key}={value!r} must be a positive integer")
    return value


def _layer_indices(tensors: Mapping[str, NDArray], count: int) -> list[int]:
    """The layer numbers ``i < count`` that some tensor ``model.layers.{i}.*`` names, in order.

    Bounded by the tensors actually present, not by the config: ``num_hidden_layers =
    10**15`` once made ``range(count)`` loop for ever over layers no file holds. Only the
    decimal spelling ``range`` would have produced counts (``01`` is not layer 1).
    """
    found = set()
    for name in tensors:
        match = _LAYER_NAME.match(name)
        if match is not None and str(int(match[1])) == match[1] and int(match[1]) < count:
            found.add(int(match[1]))
    return sorted(found)


def permute_checkpoint(
    tensors: Mapping[str, NDArray],
    config: Mapping[str, object],
    pattern: Pattern,
    *,
    method: str = "stripes",
    block_stripes: int | None = 8,
) -> PermutedModel:
    """Permute every consumer/producer pair of a LLaMA-style checkpoint (P10).

    Returns the new tensors (all of them; unpaired ones unchanged), a report per
    searched consumer, and the names of the weights whose pairing is unknown.
    Complexity: one :func:`~nmref.permutation.search_channel_permutation` per
    MLP and per value head.
    """
    model_type = config.get("model_type")
    out = dict(tensors)
    layers: list[LayerReport] = []
    paired: set[str] = set()
    if model_type in LLAMA_STYLE:
        count = _config_int(config, "num_hidden_layers")
        heads = _config_int(config, "num_attention_heads")
        kv_heads = _config_int(config, "num_key_value_heads", heads)
        if heads % kv_heads:
            raise ValueError(
                f"config.json: num_attention_heads={heads} must be a multiple of "
                f"num_key_value_heads={kv_heads}"
            )
        hidden = _config_int(config, "hidden_size")
        head_dim = _config_int(config, "head_dim", hidden // heads)
        for i in _layer_indices(tensors, count):
            prefix = f"model.layers.{i}."
            mlp = [prefix + f"mlp.{part}_proj.weight" for part in ("down", "gate", "up")]
            if all(name in tensors for name in mlp):
                layers.append(_permute_mlp(out, mlp, pattern, method, block_stripes))
                paired.update(mlp)
                paired.update(name[: -len("weight")] + "bias" for name in mlp)
            attention = [prefix + f"self_attn.{part}_proj.weight" for part in ("o", "v")]
            if all(name in tensors for name in attention):
                layers.append(
                    _permute_attention(out, attention, pattern, method, block_stripes,
                                       heads, kv_heads, head_dim)
                )  # fmt: skip
                paired.update(attention)
                paired.add(prefix + "self_attn.v_proj.bias")
    unknown = [
        name for name, array in tensors.items() if np.ndim(array) >= 2 and name not in paired
    ]
    return PermutedModel(out, layers, unknown)


def _search(
    matrix: NDArray, pattern: Pattern, method: str, block_stripes: int | None
) -> ChannelPermutation:
    return search_channel_permutation(
        matrix, pattern.n, pattern.m, method=method, block_stripes=block_stripes
    )


def _report(
    name: str, partners: tuple[str, ...], weight: NDArray, permutation: NDArray, pattern: Pattern
) -> LayerReport:
    before = permutation_objective(weight, pattern.n, pattern.m)
    after = permutation_objective(weight, pattern.n, pattern.m, permutation)
    bound = row_bound(weight, pattern.n, pattern.m)
    efficacy = 1.0 if bound == before else (after - before) / (bound - before)
    total = float(np.abs(weight.astype(np.float64)).sum())
    return LayerReport(name, partners, before, after, total, efficacy)


def _bias(out: dict[str, NDArray], weight_name: str) -> str | None:
    name = weight_name[: -len("weight")] + "bias"
    return name if name in out else None


def _permute_mlp(
    out: dict[str, NDArray], names: list[str], pattern: Pattern, method: str,
    block_stripes: int | None,
) -> LayerReport:  # fmt: skip
    down_name, gate_name, up_name = names
    down = out[down_name]
    intermediate = down.shape[1]
    for name in (gate_name, up_name):
        if out[name].ndim != 2 or out[name].shape[0] != intermediate:
            raise ValueError(
                f"tensor {name!r} {out[name].shape}: its rows must be the {intermediate} "
                f"input channels of {down_name!r}"
            )
    permutation = _search(down, pattern, method, block_stripes).permutation
    report = _report(down_name, (gate_name, up_name), down, permutation, pattern)
    out[down_name] = down[:, permutation]
    for name in (gate_name, up_name):
        out[name] = out[name][permutation]
        bias = _bias(out, name)
        if bias is not None:
            out[bias] = out[bias][permutation]
    return report


def _permute_attention(
    out: dict[str, NDArray], names: list[str], pattern: Pattern, method: str,
    block_stripes: int | None, heads: int, kv_heads: int, head_dim: int,
) -> LayerReport:  # fmt: skip
    o_name, v_name = names
    o_proj, v_proj = out[o_name], out[v_name]
    if o_proj.ndim != 2 or o_proj.shape[1] != heads * head_dim:
        raise ValueError(
            f"tensor {o_name!r} {o_proj.shape}: needs {heads} x {head_dim} = "
            f"{heads * head_dim} input channels (num_attention_heads x head_dim)"
        )
    if v_proj.ndim != 2 or v_proj.shape[0] != kv_heads * head_dim:
        raise ValueError(
            f"tensor {v_name!r} {v_proj.shape}: needs {kv_heads} x {head_dim} = "
            f"{kv_heads * head_dim} rows (num_key_value_heads x head_dim)"
        )
    if head_dim % pattern.m:
        raise ValueError(
            f"head_dim={head_dim} must be a multiple of m={pattern.m}: channels move only "
            "inside their head, so N:M groups must not straddle heads"
        )
    group = heads // kv_heads
    o_permutation = np.arange(heads * head_dim)
    v_permutation = np.arange(kv_heads * head_dim)
    for g in range(kv_heads):
        query_heads = range(g * group, (g + 1) * group)
        # The o_proj columns of every query head reading value head g, stacked as rows.
        stacked = np.concatenate(
            [o_proj[:, h * head_dim : (h + 1) * head_dim] for h in query_heads], axis=0
        )
        local = _search(stacked, pattern, method, block_stripes).permutation
        v_permutation[g * head_dim : (g + 1) * head_dim] = g * head_dim + local
        for h in query_heads:
            o_permutation[h * head_dim : (h + 1) * head_dim] = h * head_dim + local
    report = _report(o_name, (v_name,), o_proj, o_permutation, pattern)
    out[o_name] = o_proj[:, o_permutation]
    out[v_name] = v_proj[v_permutation]
    bias = _bias(out, v_name)
    if bias is not None:
        out[bias] = out[bias][v_permutation]
    return report
