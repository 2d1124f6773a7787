"""The measured GEMM corpus: schema, sources, coverage, and clear errors on corrupted rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nmsim.perf.corpus import CorpusError, load_corpus, load_corpus_file
from nmsim.perf.hardware import get_gpu

SOURCES, ROWS = load_corpus()


def test_corpus_has_the_required_size_and_coverage() -> None:
    assert len(ROWS) >= 80
    gpus = {r.gpu for r in ROWS}
    architectures = {get_gpu(g).architecture for g in gpus}
    assert {"Ampere", "Ada", "Hopper", "Blackwell"} <= architectures
    assert {"a100-sxm4-80gb", "h100-sxm", "rtx-3060", "rtx-4070-ti-super"} <= gpus
    assert {r.library for r in ROWS} >= {"cusparselt", "cutlass"}
    assert {r.level for r in ROWS} == {"kernel", "framework"}
    assert {r.dtype for r in ROWS} >= {"fp16", "bf16", "fp8", "int8"}
    assert any(r.n == 1 for r in ROWS)  # a GEMV row


def test_every_row_has_a_readable_source_and_its_evidence() -> None:
    by_id = {s.id: s for s in SOURCES}
    assert len(by_id) == len(SOURCES)
    assert len({r.id for r in ROWS}) == len(ROWS)
    for source in SOURCES:
        # a public page or a file a reader can open
        assert re.match(r"https?://", source.url) or source.file, source.id
        assert source.convention and source.where and source.trust_note, source.id
    for row in ROWS:
        assert row.source in by_id, row.id
        assert row.id.startswith(row.source), row.id
        assert row.quote.strip() and row.source_dims.strip(), row.id
        assert row.speedup > 0


def test_printed_times_and_ratios_agree() -> None:
    for row in ROWS:
        if row.dense_us is not None:
            assert row.sparse_us is not None
            assert row.speedup == pytest.approx(row.dense_us / row.sparse_us, rel=1e-12)


def test_historic_and_doubtful_rows_stay_in_the_corpus_tagged() -> None:
    """Early kernels slower than today's are kept (tagged), never silently dropped."""
    historic = [r for r in ROWS if "historic" in r.tags]
    assert len(historic) >= 10
    assert any(r.speedup < 1 for r in historic)
    assert any("regression" in r.tags for r in ROWS)


def test_spot_checks_against_the_sources() -> None:
    """Figures re-read in their sources (the PyTorch tutorial, the training blog, #111339)."""
    by_id = {r.id: r for r in ROWS}
    tutorial = by_id["pt-tutorial-semi-structured-01"]
    assert (tutorial.m, tutorial.n, tutorial.k) == (3072, 3072, 10240)
    assert (tutorial.dense_us, tutorial.sparse_us) == (870.0, 630.0)
    blog = by_id["pt-blog-sparse-training-01"]
    assert (blog.dense_us, blog.sparse_us) == (538.0, 387.0)
    gemv = by_id["pt-issue-111339-01"]
    assert gemv.n == 1 and gemv.speedup < 0.2


GOOD_SOURCE = """
[[sources]]
id = "s"
title = "t"
url = "https://example.org/x"
kind = "issue"
where = "w"
convention = "c"
trust = "high"
trust_note = "n"
"""

GOOD_ROW = """
[[rows]]
id = "s-01"
source = "s"
gpu = "a100"
dtype = "fp16"
library = "cusparselt"
level = "kernel"
m = 4096
n = 4096
k = 4096
source_dims = "4096^3"
quote = "q"
dense_us = 100.0
sparse_us = 80.0
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "corpus.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads(tmp_path: Path) -> None:
    _sources, rows = load_corpus_file(write(tmp_path, GOOD_SOURCE + GOOD_ROW))
    assert rows[0].gpu == "a100-sxm4-80gb" and rows[0].speedup == 1.25


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('gpu = "a100"', 'gpu = "v100"', r"rows\[0\] \(id='s-01'\): gpu='v100' is not in the GPU"),
        ('dtype = "fp16"', 'dtype = "fp8"', r"rows\[0\] \(id='s-01'\).*no tensor-core path"),
        ('library = "cusparselt"', 'library = "cublas"', r"id='s-01'.*library='cublas' must"),
        ('level = "kernel"', 'level = "e2e"', r"id='s-01'.*level='e2e' must be one of"),
        ("k = 4096", "k = 4090", r"id='s-01'.*k=4090 must be a multiple of 4"),
        ("m = 4096", "m = 0", r"id='s-01'.*m=0 must be an integer >= 1"),
        ("m = 4096", "m = 40.5", r"id='s-01'.*m=40.5 must be an integer"),
        ("dense_us = 100.0", "dense_us = -1.0", r"id='s-01'.*dense_us=-1.0 must be finite"),
        ("dense_us = 100.0", "dense_us = nan", r"id='s-01'.*dense_us=nan must be finite"),
        ("sparse_us = 80.0", "", r"id='s-01'.*dense_us and sparse_us must be given together"),
        ('source = "s"', 'source = "x"', r"id='s-01'.*source='x' is not a source id"),
        ('quote = "q"', 'quote = ""', r"id='s-01'.*missing or empty field\(s\) \['quote'\]"),
        ("sparse_us = 80.0", "sparse_us = 80.0\nspeedup = 1.5", r"speedup=1.5 disagrees"),
        ("sparse_us = 80.0", "sparse_us = 1.0", r"speedup=100 is outside"),
    ],
)
def test_a_corrupted_row_names_the_file_the_row_and_the_rule(
    tmp_path: Path, old: str, new: str, match: str
) -> None:
    assert old in GOOD_ROW
    path = write(tmp_path, GOOD_SOURCE + GOOD_ROW.replace(old, new))
    with pytest.raises(CorpusError, match=match) as caught:
        load_corpus_file(path)
    assert str(path) in str(caught.value)


def test_corrupted_sources_and_duplicates_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"sources\[0\] \(id='s'\): a source needs a 'url'"):
        load_corpus_file(write(tmp_path, GOOD_SOURCE.replace('url = "https://example.org/x"', "")))
    with pytest.raises(CorpusError, match=r"trust='maybe' must be one of"):
        load_corpus_file(write(tmp_path, GOOD_SOURCE.replace('"high"', '"maybe"') + GOOD_ROW))
    with pytest.raises(CorpusError, match="not valid TOML"):
        load_corpus_file(write(tmp_path, GOOD_SOURCE + "[[rows]\n"))
    path = write(tmp_path, GOOD_SOURCE + GOOD_ROW)
    with pytest.raises(CorpusError, match=r"appears in two corpus files|appears twice"):
        load_corpus([path, path], include_shipped=False)


def test_dry_run_sources_are_dropped_with_their_rows(tmp_path: Path) -> None:
    text = GOOD_SOURCE.replace('trust_note = "n"', 'trust_note = "n"\ndry_run = true') + (
        GOOD_ROW.replace('gpu = "a100"', 'gpu = "cpu"')
    )
    sources, rows = load_corpus([write(tmp_path, text)], include_shipped=False)
    assert sources == () and rows == ()
