"""Write the golden compressed-tensors checkpoints of ``tests/data/checkpoint_formats/``.

``golden_dense.safetensors`` holds small 2:4 weights in every element kind, chosen to hit
the formats' corners: under-full and all-zero groups, ``-0.0`` at stored and unstored
positions, NaN and inf bit patterns (kept bit for bit), the largest and smallest values,
``cols % 8 == 4`` (a padded bitmask byte), and tensors that stay dense (a bias, a 1-D norm,
an embedding that is not 2:4). The other two files are what ``nmsim convert`` writes from it:

    python scripts/golden/make_checkpoint_formats.py   # rewrites the 3 files and golden.json

``tests/test_checkpoint_formats.py`` checks that encoding the dense file gives these bytes
and that decoding them gives the dense bits back; ``golden.json`` pins their SHA-256. The
weights are stored, never regenerated from a seed in the tests.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nmsim.formats.compressed_checkpoint import _safetensors_header, convert  # noqa: E402

FOLDER = ROOT / "tests" / "data" / "checkpoint_formats"


def _two_of_four(
    rng: np.random.Generator, rows: int, cols: int, per_pair: bool = False
) -> np.ndarray:
    """A keep pattern: 2 of every 4 (1 of every 2 with ``per_pair``), some groups emptied."""
    if per_pair:
        first = rng.integers(0, 2, size=(rows, cols // 2))
        keep = np.stack((first == 0, first == 1), axis=-1).reshape(rows, cols)
    else:
        keep = np.zeros((rows, cols // 4, 4), dtype=bool)
        order = np.argsort(rng.random((rows, cols // 4, 4)), axis=-1)[..., :2]
        np.put_along_axis(keep, order, True, axis=-1)
        keep = keep.reshape(rows, cols)
    # under-full groups: drop one or both kept entries of about a quarter of the groups
    drop = rng.random(keep.shape) < 0.15
    return keep & ~drop


def tensors() -> dict[str, tuple[str, np.ndarray]]:
    rng = np.random.default_rng(20261203)
    out: dict[str, tuple[str, np.ndarray]] = {}

    fp16 = rng.standard_normal((64, 64)).astype(np.float16)
    fp16[~_two_of_four(rng, 64, 64)] = 0
    fp16[0, :4] = [0, 0, 0, 0]  # an all-zero group
    fp16[0, 4:8] = [np.float16(-0.0), 1.5, 0, np.float16(-0.0)]  # -0.0 around one nonzero
    fp16[1, 0:4] = [np.inf, 0, -np.inf, 0]
    fp16[1, 4:8] = [0, np.float16(65504), 0, np.float16(6e-8)]  # largest, smallest subnormal
    out["layers.0.mlp.up_proj.weight"] = ("F16", fp16)

    bf16 = (rng.standard_normal((64, 64)).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16
    )
    bf16[~_two_of_four(rng, 64, 64)] = 0
    bf16[0, 0:4] = [0x7FC1, 0, 0xFF81, 0]  # NaNs with payloads
    bf16[0, 4:8] = [0x8000, 0x3F80, 0, 0]  # -0.0 beside 1.0
    out["layers.0.mlp.down_proj.weight"] = ("BF16", bf16)

    fp32 = rng.standard_normal((64, 32)).astype(np.float32)
    fp32[~_two_of_four(rng, 64, 32, per_pair=True)] = 0  # 1:2, which the CUTLASS fp32 mode needs
    fp32[2, 0:2] = [np.float32(-0.0), 0]
    out["layers.0.self_attn.q_proj.weight"] = ("F32", fp32)

    int8 = rng.integers(-128, 128, size=(64, 64)).astype(np.int8)
    int8[~_two_of_four(rng, 64, 64)] = 0
    out["layers.0.self_attn.k_proj.weight"] = ("I8", int8)

    fp8 = rng.integers(0, 256, size=(4, 12)).astype(np.uint8)  # cols % 8 == 4: a padded byte
    fp8[~_two_of_four(rng, 4, 12)] = 0
    fp8[0, 0:4] = [0x80, 0x7F, 0, 0x80]  # -0.0 twice, a NaN
    out["layers.0.self_attn.v_proj.weight"] = ("F8_E4M3", fp8)

    out["layers.0.mlp.up_proj.bias"] = ("F16", rng.standard_normal(64).astype(np.float16))
    out["norm.weight"] = ("F32", np.ones(64, dtype=np.float32))
    out["embed_tokens.weight"] = ("F32", rng.standard_normal((8, 16)).astype(np.float32))
    return out


def write_dense(path: Path) -> None:
    items = tensors()
    entries = [(name, dtype, array.shape) for name, (dtype, array) in items.items()]
    with open(path, "wb") as handle:
        handle.write(_safetensors_header(entries, {"format": "pt"}))
        for _, array in items.values():
            handle.write(np.ascontiguousarray(array).tobytes())


def main() -> None:
    FOLDER.mkdir(parents=True, exist_ok=True)
    dense = FOLDER / "golden_dense.safetensors"
    write_dense(dense)
    convert(dense, FOLDER / "golden_sparse24_bitmask.safetensors", "sparse-24-bitmask", force=True)
    convert(dense, FOLDER / "golden_sparse24_cutlass.safetensors", "cutlass", force=True)
    digests = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(FOLDER.glob("golden_*.safetensors"))
    }
    (FOLDER / "golden.json").write_text(json.dumps({"sha256": digests}, indent=1) + "\n")
    for name, digest in digests.items():
        print(f"{name}: {(FOLDER / name).stat().st_size} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
