"""Benchmark: a synthetic sharded 7B-shaped BF16 checkpoint through ``nmref mask`` (issue 18).

Generates, on the fly and one tensor at a time, a Hugging Face model folder shaped like
Llama-2-7B (hidden 4096, MLP 11008, vocabulary 32000; 32 layers at ``--scale 1``, 13.5 GB)
in BF16 N(0, 1/fan_in), in shards of about 2 GB with an index. ``--scale`` keeps every
tensor's shape and scales the number of layers (``--scale 0.25``: 8 layers, about 3.7 GB
with the embeddings; the default). Then, each command in its own process (wall time and
the child's peak RSS from ``os.wait4``; the page cache is warm, the files were just written):

1. read: every tensor read through ``nmref.io.sharded.open_model(...).records()`` and summed
   (BF16 upcast included): GB/s of the shards' bytes, and peak RSS against the largest
   tensor's float32 upcast;
2. ``nmref mask DIR --pattern 2:4 -o OUT`` (1-D, every GEMM weight and the embeddings):
   GB/s, peak RSS;
3. ``nmref mask --pattern 8:16 --transposable --method exact`` on the tensors of
   ``--transposable-include`` (default: layers 0 and 1), in one process and on a local Dask
   cluster of ``--workers`` (default 2) worker processes: M x M tiles per second, the
   2-worker / 1-process ratio, and the two outputs compared byte for byte;
4. from the measured exact tiles/s per core, what an exact 8:16 pass over Llama-2-70B costs
   (its GEMM weights' tile count from its published shapes, computed below).

Run: ``python benchmarks/bench_checkpoints.py [--scale 0.25] [--workers 2] [--keep DIR]``.
Everything is written to a temporary folder (or ``--keep DIR``) and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmref.io.safetensors_writer import PlannedTensor, stream_safetensors  # noqa: E402
from nmref.io.sharded import INDEX_NAME  # noqa: E402

# Llama-2-7B: dim 4096 and 32 layers (the llama repository's ModelArgs defaults); MLP width
# 11008 = 2/3 * 4 * 4096 rounded up to its multiple_of=256; vocabulary 32000.
HIDDEN, MLP, VOCAB, LAYERS = 4096, 11008, 32000, 32
SHARD_BYTES = 2 * 10**9

#: Llama-2-70B (dim 8192, 80 layers, 8 key/value heads of 128, vocab 32000): the GEMM weights
#: of one layer and the output head, as (rows, columns): the shapes of one of the 8
#: model-parallel ``consolidated.0X.pth`` files (wq [1024, 8192], wk [128, 8192], w1
#: [3584, 8192], output [4000, 8192], as listed on datascience.stackexchange.com question
#: 126942) times 8 along the split axis.
LLAMA_70B_LAYER = [
    (8192, 8192),  # q_proj
    (1024, 8192),  # k_proj
    (1024, 8192),  # v_proj
    (8192, 8192),  # o_proj
    (28672, 8192),  # gate_proj
    (28672, 8192),  # up_proj
    (8192, 28672),  # down_proj
]
LLAMA_70B_LAYERS = 80
LLAMA_70B_HEAD = (32000, 8192)


def layer_tensors(layer: int) -> list[tuple[str, tuple[int, ...]]]:
    """One Llama-2-7B decoder layer: names and shapes (PyTorch [out, in])."""
    prefix = f"model.layers.{layer}"
    return [
        (f"{prefix}.input_layernorm.weight", (HIDDEN,)),
        (f"{prefix}.mlp.down_proj.weight", (HIDDEN, MLP)),
        (f"{prefix}.mlp.gate_proj.weight", (MLP, HIDDEN)),
        (f"{prefix}.mlp.up_proj.weight", (MLP, HIDDEN)),
        (f"{prefix}.post_attention_layernorm.weight", (HIDDEN,)),
        (f"{prefix}.self_attn.k_proj.weight", (HIDDEN, HIDDEN)),
        (f"{prefix}.self_attn.o_proj.weight", (HIDDEN, HIDDEN)),
        (f"{prefix}.self_attn.q_proj.weight", (HIDDEN, HIDDEN)),
        (f"{prefix}.self_attn.v_proj.weight", (HIDDEN, HIDDEN)),
    ]


def model_tensors(layers: int) -> list[tuple[str, tuple[int, ...]]]:
    tensors = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for layer in range(layers):
        tensors += layer_tensors(layer)
    return [*tensors, ("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]


def bf16_values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """N(0, 1/fan_in) rounded to BF16 (as float32 holding BF16 values), seeded by name."""
    rng = np.random.default_rng(_seed(name))
    values = rng.standard_normal(shape, dtype=np.float32)
    values *= np.float32(1 / np.sqrt(shape[-1]))
    bits = values.view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # round to nearest even
    return rounded.astype(np.uint32).view(np.float32)


def _seed(name: str) -> int:
    import zlib

    return zlib.crc32(name.encode())


def write_model(folder: Path, layers: int) -> tuple[int, int]:
    """Write the shards and the index; returns (bytes of the shards, largest tensor's bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = model_tensors(layers)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in tensors:
        nbytes = 2 * int(np.prod(shape))
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    weight_map = {}
    total = 0
    for index, shard in enumerate(shards):
        file_name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        planned = [PlannedTensor(name, shape, "bfloat16") for name, shape in shard]
        total += stream_safetensors(
            str(folder / file_name),
            planned,
            ((name, bf16_values(name, shape)) for name, shape in shard),
        )
        weight_map.update(dict.fromkeys((name for name, _ in shard), file_name))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX_NAME).write_text(json.dumps(index, indent=2))
    (folder / "config.json").write_text(
        json.dumps({"_name_or_path": f"synthetic-llama-7b-shaped-{layers}-layers"})
    )
    largest = max(2 * int(np.prod(shape)) for _, shape in tensors)
    return total, largest


def timed(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, the child's own peak RSS in MB (``os.wait4``), and its stdout."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()[-2000:]}")
        return seconds, usage.ru_maxrss * 1024 / 1e6, out.read().decode()


READ_PROBE = """
import sys, numpy as np
from nmref.io.sharded import open_model
total = 0.0
for record in open_model(sys.argv[1]).records():
    total += float(np.sum(record.array, dtype=np.float64))
print(total)
"""

BASELINE_PROBE = "import numpy, nmref.io.sharded, nmref.cli"

# Start a local cluster as nmref mask --workers N does, run one trivial task, stop it.
CLUSTER_PROBE = """
import sys
from nmref.io.distributed import dask_client
if __name__ == "__main__":
    with dask_client("local", int(sys.argv[1])) as client:
        client.submit(sum, [1, 2]).result()
"""


def tiles(folder: Path, include: str, m: int) -> int:
    import re

    from nmref.io.sharded import open_model

    pattern = re.compile(include)
    return sum(
        int(np.prod(info.shape)) // (m * m)
        for info in open_model(folder).infos()
        if len(info.shape) == 2 and pattern.search(info.name)
    )


def same_folders(first: Path, second: Path) -> bool:
    names = sorted(p.name for p in first.iterdir())
    if names != sorted(p.name for p in second.iterdir()):
        return False
    return all((first / n).read_bytes() == (second / n).read_bytes() for n in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=0.25, help="layers = 32 x scale")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--transposable-include",
        default=r"layers\.[01]\.(self_attn|mlp)",
        help="tensors of the exact transposable runs (regex)",
    )
    parser.add_argument("--keep", help="folder to write into and keep (default: temporary)")
    parser.add_argument("--generate", nargs=2, metavar=("DIR", "LAYERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        print(*write_model(Path(args.generate[0]), int(args.generate[1])))
        return
    layers = max(1, round(LAYERS * args.scale))
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
    python = sys.executable
    try:
        start = time.perf_counter()
        model = work / "model"
        # generated by a child: a child's ru_maxrss starts from its parent's peak at fork,
        # so this process must stay small for the measurements below
        _, _, printed = timed([python, __file__, "--generate", str(model), str(layers)])
        total, largest = (int(x) for x in printed.split())
        print(
            f"synthetic Llama-2-7B-shaped checkpoint, {layers} of 32 layers (--scale "
            f"{args.scale}): {total / 1e9:.2f} GB BF16 in "
            f"{len(list(model.glob('*.safetensors')))} shards, largest tensor "
            f"{largest / 1e6:.0f} MB ({2 * largest / 1e6:.0f} MB as float32); written in "
            f"{time.perf_counter() - start:.0f} s"
        )
        base_s, base_mb, _ = timed([python, "-c", BASELINE_PROBE])
        print(f"baseline process (imports only): {base_s:.2f} s, peak RSS {base_mb:.0f} MB")

        read_s, read_mb, _ = timed([python, "-c", READ_PROBE, str(model)])
        print(
            f"read every tensor (BF16 -> float32, summed): {read_s:.1f} s, "
            f"{total / 1e9 / read_s:.2f} GB/s, peak RSS {read_mb:.0f} MB = baseline + "
            f"{(read_mb - base_mb) / (2 * largest / 1e6):.2f} x the largest float32 upcast"
        )

        mask = [python, "-m", "nmref", "mask", str(model), "--quiet"]
        one_d_s, one_d_mb, _ = timed([*mask, "--pattern", "2:4", "-o", str(work / "1d")])
        print(
            f"nmref mask 2:4 (1-D, every 2-D tensor): {one_d_s:.1f} s, "
            f"{total / 1e9 / one_d_s:.2f} GB/s, peak RSS {one_d_mb:.0f} MB = baseline + "
            f"{(one_d_mb - base_mb) / (2 * largest / 1e6):.2f} x the largest float32 upcast"
        )
        shutil.rmtree(work / "1d")

        include = args.transposable_include
        count = tiles(model, include, 16)
        exact = [*mask, "--pattern", "8:16", "--transposable", "--include", include]
        one_s, one_mb, _ = timed([*exact, "-o", str(work / "t1")])
        many_s, many_mb, _ = timed([*exact, "-o", str(work / "t2"), "--workers", str(args.workers)])
        probe = work / "cluster_probe.py"
        probe.write_text(CLUSTER_PROBE)
        start_s, _, _ = timed([python, str(probe), str(args.workers)])
        same = same_folders(work / "t1", work / "t2")
        rate = count / one_s
        print(
            f"nmref mask 8:16 exact transposable, --include {include!r} ({count:,} tiles): "
            f"1 process {one_s:.1f} s ({rate:,.0f} tiles/s, peak RSS {one_mb:.0f} MB); "
            f"{args.workers} Dask workers {many_s:.1f} s (peak RSS of the client "
            f"{many_mb:.0f} MB); 1 process / {args.workers} workers = {one_s / many_s:.2f}x; "
            f"outputs byte-identical: {same}"
        )
        print(
            f"starting and stopping a local cluster of {args.workers} workers alone: "
            f"{start_s:.1f} s; net of it, 1 process / {args.workers} workers = "
            f"{one_s / max(many_s - start_s, 1e-9):.2f}x; load average while measuring "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        head = LLAMA_70B_HEAD[0] * LLAMA_70B_HEAD[1]
        weights = LLAMA_70B_LAYERS * sum(r * c for r, c in LLAMA_70B_LAYER) + head
        tiles_70b = weights // 256
        print(
            f"Llama-2-70B exact 8:16: {weights / 1e9:.1f} B GEMM parameters, "
            f"{tiles_70b / 1e6:.0f} M tiles; at the {rate:,.0f} tiles/s per core measured here "
            f"(including this process's start and reading): {tiles_70b / rate / 3600:.1f} "
            "core-hours"
        )
        if not same:
            raise SystemExit("the Dask output differs from the one-process output")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
