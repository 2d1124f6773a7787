"""The default selection of tensors (:mod:`nmref.io.selection`): one rule for ``nmref mask``,
``nmref audit`` and ``nmsim report``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from nmref.cli import main as nmref_main
from nmref.io.checkpoints import iter_tensors
from nmref.io.selection import EMBEDDING_REASON, embedding_skip_reason, is_embedding
from nmsim.report.build import ReportSettings, build_report


def _bert_like(path) -> None:
    """A tiny BERT-shaped file: a 2-row token-type table fits no 4x4 tile (the MiniLM case)."""
    rng = np.random.default_rng(0)
    save_file(
        {
            "embeddings.word_embeddings.weight": rng.standard_normal((32, 8)).astype(np.float32),
            "embeddings.token_type_embeddings.weight": rng.standard_normal((2, 8)).astype(
                np.float32
            ),
            "encoder.layer.0.attention.self.query.weight": rng.standard_normal((8, 8)).astype(
                np.float32
            ),
            "encoder.layer.0.attention.self.query.bias": np.zeros(8, np.float32),
            "encoder.layer.0.output.dense.weight": rng.standard_normal((8, 16)).astype(np.float32),
        },
        str(path),
    )


ANALYSED = ["encoder.layer.0.attention.self.query.weight", "encoder.layer.0.output.dense.weight"]


@pytest.mark.parametrize(
    ("name", "embedding"),
    [
        ("embeddings.token_type_embeddings.weight", True),
        ("model.embed_tokens.weight", True),
        ("Embedding.weight", True),
        ("encoder.layer.0.output.dense.weight", False),
        ("lm_head.weight", False),
    ],
)
def test_the_rule_names_embedding_tables_and_the_flag_that_selects_them(name, embedding):
    assert is_embedding(name) == embedding
    assert embedding_skip_reason(name, embeddings=False) == (
        EMBEDDING_REASON if embedding else None
    )
    assert embedding_skip_reason(name, embeddings=True) is None
    assert "--embeddings" in EMBEDDING_REASON


def test_mask_and_report_select_the_same_tensors_by_default(tmp_path, capsys):
    # Issue 37: `nmref mask --transposable` on MiniLM exited 2 on
    # embeddings.token_type_embeddings.weight, which `nmsim report` skips.
    path = tmp_path / "bert.safetensors"
    _bert_like(path)
    out = tmp_path / "t.safetensors"
    assert (
        nmref_main(["mask", str(path), "--pattern", "2:4", "--transposable", "-o", str(out)]) == 0
    )
    assert "--embeddings selects it" in capsys.readouterr().err
    masked = sorted(record.name for record in iter_tensors(out))
    report = build_report(str(path), ReportSettings(methods=("1d",)))
    analysed = sorted(e["name"] for e in report["tensors"] if e["status"] == "ok")
    assert masked == analysed == ANALYSED
    reasons = {e["name"]: e.get("reason") for e in report["tensors"]}
    assert reasons["embeddings.token_type_embeddings.weight"] == EMBEDDING_REASON
    # The other file writers (.npz in memory, sharded) take the same rule.
    npz = tmp_path / "t.npz"
    assert nmref_main(["mask", str(path), "--pattern", "2:4", "-o", str(npz)]) == 0
    assert sorted(np.load(npz).files) == ANALYSED


def test_embeddings_flag_selects_them_and_a_failing_tensor_names_exclude(tmp_path, capsys):
    path = tmp_path / "bert.safetensors"
    _bert_like(path)
    capsys.readouterr()
    argv = ["mask", str(path), "--pattern", "2:4", "--transposable", "-o", str(tmp_path / "t.npz")]
    assert nmref_main([*argv, "--embeddings"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("nmref: error: tensor 'embeddings.token_type_embeddings.weight'")
    assert error.endswith(r"--exclude '^embeddings\.token_type_embeddings\.weight$'")
    assert "\n" not in error
    exclude = r"^embeddings\.token_type_embeddings\.weight$"
    assert nmref_main([*argv, "--embeddings", "--exclude", exclude, "--force"]) == 0
    assert "embeddings.word_embeddings.weight" in np.load(tmp_path / "t.npz").files
    report = build_report(str(path), ReportSettings(methods=("1d",), embeddings=True))
    assert "embeddings.word_embeddings.weight" in {
        e["name"] for e in report["tensors"] if e["status"] == "ok"
    }


def test_audit_takes_the_same_rule(tmp_path, capsys):
    path = tmp_path / "bert.safetensors"
    _bert_like(path)
    capsys.readouterr()
    assert nmref_main(["audit", str(path), "--pattern", "2:4", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(t["name"] for t in document["tensors"]) == ANALYSED


def test_nothing_selected_says_what_was_skipped(tmp_path, capsys):
    path = tmp_path / "bert.safetensors"
    _bert_like(path)
    capsys.readouterr()
    argv = ["mask", str(path), "--pattern", "2:4", "-o", str(tmp_path / "t.npz")]
    assert nmref_main([*argv, "--include", "embeddings"]) == 2
    error = capsys.readouterr().err
    assert "no eligible tensor" in error and "--embeddings selects it" in error
