"""Prediction intervals and verdicts for modelled 2:4 speedups.

An interval is the model's speedup times the spread of its own out-of-sample
errors on comparable measured rows: ``nmsim calibrate`` predicts every corpus
row with a fit that never saw the row's source (leave-one-source-out), takes
the log residuals ``log(measured / predicted)`` and stores their quantiles per
(architecture, regime) in ``nmsim/data/gemm_intervals.toml``. A GPU without a
measured row in the corpus gets the pooled residuals of its regime, widened,
and is flagged ``extrapolated``. See ``specs/gemm_model.md`` section 8.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from nmsim.perf.gemm_parameters import architecture_key
from nmsim.perf.hardware import GPU, get_gpu

__all__ = [
    "SMALL_N",
    "IntervalTable",
    "SpeedupInterval",
    "default_interval_table",
    "regime",
    "speedup_interval",
    "verdict",
]

#: Largest ``n`` (tokens) of the small-n (decode, GEMV) regime.
SMALL_N = 64


def regime(n: int) -> str:
    """``small-n`` (decode-shaped, ``n <= 64``) or ``large-n``."""
    return "small-n" if n <= SMALL_N else "large-n"


def verdict(low: float, high: float) -> str:
    """``faster`` if the whole interval is above 1, ``slower`` if below, else ``no gain``."""
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "no gain"


@dataclass(frozen=True)
class SpeedupInterval:
    """A modelled speedup's prediction interval and what it rests on."""

    speedup: float
    low: float
    high: float
    verdict: str
    basis: str
    extrapolated: bool


@dataclass(frozen=True)
class ResidualQuantiles:
    """Quantiles of ``log(measured / predicted)`` speedup over ``count`` CV rows."""

    count: int
    low: float
    high: float


@dataclass(frozen=True)
class IntervalTable:
    """Residual quantiles per (architecture, regime) and pooled per regime.

    Attributes
    ----------
    coverage : float
        Nominal coverage of the interval (0.8: the 10th to 90th percentile).
    minimum_rows : int
        Fewest residuals an (architecture, regime) group needs to be used on
        its own; smaller groups use the pooled regime quantiles.
    extrapolation_widening : float
        Factor on the pooled log quantiles for a GPU with no measured row.
    measured_gpus : frozenset of str
        GPUs with at least one corpus row.
    min_n : dict
        Smallest ``n`` of a fitted row per level: below it the model extrapolates in
        ``n`` (no kernel-level measurement has ``n < 64``).
    groups, pooled : dict
    provenance : str
    """

    coverage: float
    minimum_rows: int
    extrapolation_widening: float
    measured_gpus: frozenset[str]
    groups: dict[tuple[str, str], ResidualQuantiles]
    pooled: dict[str, ResidualQuantiles]
    min_n: dict[str, int]
    provenance: str = ""

    def interval(self, gpu: GPU, n: int, speedup: float, level: str = "kernel") -> SpeedupInterval:
        """The interval around a modelled ``speedup`` of an ``n``-column GEMM on ``gpu``."""
        name = regime(n)
        pooled = self.pooled[name]
        unmeasured = gpu.key not in self.measured_gpus
        below = n < self.min_n.get(level, 1)
        extrapolated = unmeasured or below
        arch = architecture_key(gpu)
        group = self.groups.get((arch, name))
        if extrapolated:
            widen = self.extrapolation_widening
            low, high = pooled.low * widen, pooled.high * widen
            why = []
            if unmeasured:
                why.append(f"no {gpu.key} row in the corpus")
            if below:
                why.append(
                    f"no {level}-level row with n < {self.min_n[level]} in the corpus (every "
                    "published batch-1 measurement is a framework-level slowdown)"
                )
            basis = (
                f"extrapolated: {'; '.join(why)}; {name} residuals of all GPUs "
                f"({pooled.count} rows) widened {widen:g}x"
            )
        elif group is not None and group.count >= self.minimum_rows:
            low, high = group.low, group.high
            basis = f"{arch} {name}: {group.count} cross-validated rows"
        else:
            low, high = pooled.low, pooled.high
            have = 0 if group is None else group.count
            basis = (
                f"{name} residuals of all GPUs ({pooled.count} rows; {arch} has "
                f"{have}, fewer than {self.minimum_rows})"
            )
        lo, hi = speedup * math.exp(low), speedup * math.exp(high)
        return SpeedupInterval(
            speedup=speedup,
            low=lo,
            high=hi,
            verdict=verdict(lo, hi),
            basis=f"{self.coverage:.0%} interval, {basis}",
            extrapolated=extrapolated,
        )


def _quantiles(raw: dict[str, Any]) -> ResidualQuantiles:
    return ResidualQuantiles(int(raw["count"]), float(raw["low"]), float(raw["high"]))


def table_from_toml(raw: dict[str, Any]) -> IntervalTable:
    """Parse ``gemm_intervals.toml``."""
    groups = {}
    for key, value in raw.get("groups", {}).items():
        architecture, name = key.split("/")
        groups[(architecture, name)] = _quantiles(value)
    pooled = {name: _quantiles(value) for name, value in raw["pooled"].items()}
    for name in ("small-n", "large-n"):
        if name not in pooled:
            raise ValueError(f"gemm_intervals.toml: pooled quantiles for {name!r} are missing")
    return IntervalTable(
        coverage=float(raw["coverage"]),
        minimum_rows=int(raw["minimum_rows"]),
        extrapolation_widening=float(raw["extrapolation_widening"]),
        measured_gpus=frozenset(raw["measured_gpus"]),
        groups=groups,
        pooled=pooled,
        min_n={str(k): int(v) for k, v in raw.get("min_n", {}).items()},
        provenance=str(raw.get("provenance", "")),
    )


@cache
def default_interval_table() -> IntervalTable:
    """The table shipped in ``nmsim/data/gemm_intervals.toml`` (``nmsim calibrate --write``)."""
    text = resources.files("nmsim").joinpath("data/gemm_intervals.toml").read_text("utf-8")
    return table_from_toml(tomllib.loads(text))


def speedup_interval(
    gpu: str | GPU, *, n: int, speedup: float, level: str = "kernel"
) -> SpeedupInterval:
    """Prediction interval and verdict for a modelled speedup (see module docs).

    The residuals pool both levels (each source measures one); ``level`` decides
    whether ``n`` lies inside the corpus's coverage at that level.
    """
    return default_interval_table().interval(get_gpu(gpu), n, speedup, level)
