"""The authors' permutation search: the best of ``K`` random row permutations.

``specs/bimask.md`` section 5 (Zhang et al. 2023, Sec. 3; code ``get_best_permutation``):
draw ``K`` permutations, score them (:mod:`~nmref.bimask.scores`), keep the first
maximiser; :func:`is_search_step` says when a training run searches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_integer, is_integer
from nmref.bimask.inputs import _as_generator, _as_weight
from nmref.bimask.masks import forward_mask
from nmref.bimask.scores import score_permutations
from nmref.bimask.settings import Criterion, check_criterion
from nmref.layouts import Layout
from nmref.patterns import check_pattern

__all__ = [
    "CANDIDATE_MEMORY_BUDGET",
    "PermutationSearch",
    "evaluated_permutations",
    "is_search_step",
    "search_permutation",
]


@dataclass(frozen=True)
class PermutationSearch:
    """Result of :func:`search_permutation`.

    Attributes
    ----------
    permutation : ndarray of intp, shape (out,)
        The chosen permutation (the first candidate with the maximal score).
    score : int
        Its score under ``criterion``.
    candidates : ndarray of intp, shape (num_evaluated, out)
        Every evaluated permutation in evaluation order (identity first when
        it was included).
    candidate_scores : ndarray of int64, shape (num_evaluated,)
    best_index : int
        Index of the winner in ``candidates``.
    criterion : str
    """

    permutation: NDArray[np.intp]
    score: int
    candidates: NDArray[np.intp]
    candidate_scores: NDArray[np.int64]
    best_index: int
    criterion: str


CANDIDATE_MEMORY_BUDGET = 2 * 2**30


def evaluated_permutations(
    candidates: int | ArrayLike, out_channels: int, rng: object, include_identity: bool
) -> NDArray[np.intp]:
    """The permutations :func:`search_permutation` scores, in order, as a ``(K, out)`` array.

    ``candidates`` is a count drawn with ``rng.permutation(out)`` or an explicit array
    (then ``rng`` is unused); the identity comes first with ``include_identity``. Host-side
    and shared with ``nmsim.torch.bimask`` so that both paths draw the same candidates.
    """
    if is_integer(candidates):
        count = int(candidates)  # type: ignore[arg-type]
        if count < 0:
            raise ValueError(f"candidates={count} must be >= 0")
        needed = count * out_channels * np.dtype(np.intp).itemsize
        if needed > CANDIDATE_MEMORY_BUDGET:
            raise ValueError(
                f"candidates={count} would hold {needed / 2**30:.3g} GiB of permutations of "
                f"{out_channels} rows, over the {CANDIDATE_MEMORY_BUDGET / 2**30:g} GiB budget "
                "(nmref.bimask.CANDIDATE_MEMORY_BUDGET): lower candidates"
            )
        if rng is None:
            raise TypeError(
                f"rng is required when candidates is a count (candidates={count}): pass an int "
                "seed (rng=0) or a numpy.random.Generator; there is no hidden global seed"
            )
        generator = _as_generator(rng)
        drawn = np.empty((count, out_channels), dtype=np.intp)
        for k in range(count):
            drawn[k] = generator.permutation(out_channels)
    else:
        drawn = np.asarray(candidates)
        if drawn.size and drawn.dtype.kind not in "iu":
            # astype(intp) below would truncate 0.5 to 0 and pass a non-permutation off as one.
            raise TypeError(f"candidates must be integer permutations, got dtype={drawn.dtype}")
        if drawn.ndim != 2 or drawn.shape[1] != out_channels:
            raise ValueError(
                f"candidates must be an int or an array of shape (K, {out_channels}), "
                f"got shape {drawn.shape}"
            )
    evaluated = (
        np.concatenate([np.arange(out_channels, dtype=np.intp)[None, :], drawn.astype(np.intp)])
        if include_identity
        else drawn.astype(np.intp)
    )
    if len(evaluated) == 0:
        raise ValueError("no candidate to evaluate: candidates=0 and include_identity=False")
    return evaluated


def search_permutation(
    weight: ArrayLike,
    n: int,
    m: int,
    *,
    candidates: int | ArrayLike = 100,
    criterion: Criterion = "kept",
    include_identity: bool = False,
    rng: np.random.Generator | int | None = None,
    layout: Layout | None = None,
    straddle: bool = False,
) -> PermutationSearch:
    """Bi-Mask's permutation search: the best of ``K`` uniformly random row permutations.

    Computes ``F = forward_mask(weight)``, draws ``K`` permutations with
    ``rng.permutation(out)`` (in order), scores them with
    :func:`score_permutations`, and returns the first maximiser. With
    ``include_identity`` the identity is evaluated first (index 0) and the
    random ones must beat it strictly; the random draws are the same either way.

    Parameters
    ----------
    weight : array_like of float, shape (out, in) or (out, in, *kernel)
    n, m : int
    candidates : int or array_like of int, default 100
        ``K`` (the code default is 10, the README ImageNet runs and DeiT use
        100), or an explicit ``(K, out)`` array of permutations -- e.g. drawn
        with ``np.random.RandomState`` to replay the code's stream; then
        ``rng`` is not used.
    criterion : {"kept", "eligible"}, default "kept"
        ``"kept"`` is the code, ``"eligible"`` the paper's wording.
    include_identity : bool, default False
        The code never evaluates the identity (``False``).
    rng : numpy.random.Generator or int
        Source of the candidates; an int is a seed for ``default_rng``.
        Required when ``candidates`` is an int (there is no hidden global seed).
    layout, straddle
        As :func:`backward_mask`.

    Returns
    -------
    PermutationSearch

    Raises
    ------
    TypeError
        If ``rng`` is not a Generator or int (and no explicit candidates were given),
        or explicit ``candidates`` are not integers.
    ValueError
        If no candidate would be evaluated, or as :func:`score_permutations`.

    Notes
    -----
    Complexity O(K * size) (plus O(size * m) for ``F``). Same ``rng`` state,
    same result. Zhang et al. 2023, Sec. 3; code ``get_best_permutation``.
    """
    pattern = check_pattern(n, m)
    check_criterion(criterion)
    array = _as_weight(weight)
    evaluated = evaluated_permutations(candidates, array.shape[0], rng, include_identity)
    mask = forward_mask(array, pattern.n, pattern.m, layout=layout, straddle=straddle)
    scores = score_permutations(
        mask, evaluated, pattern.n, pattern.m, criterion=criterion, layout=layout, straddle=straddle
    )
    best = int(np.argmax(scores))  # first maximiser, as the code's strict ">"
    return PermutationSearch(
        permutation=evaluated[best].copy(),
        score=int(scores[best]),
        candidates=evaluated,
        candidate_scores=scores,
        best_index=best,
        criterion=criterion,
    )


def is_search_step(
    step: int, interval: int = 100, *, first_search: Literal["start", "interval"] = "start"
) -> bool:
    """Whether the permutation is searched at training step ``step`` (0-based).

    ``first_search="start"`` searches at steps 0, T, 2T, ... (the CIFAR
    script); ``"interval"`` at T, 2T, ... with the identity before (the
    ImageNet script increments its counter before the forward pass). ``F`` and
    ``B`` are recomputed at every step regardless.

    Examples
    --------
    >>> [s for s in range(250) if is_search_step(s, 100)]
    [0, 100, 200]
    >>> [s for s in range(250) if is_search_step(s, 100, first_search="interval")]
    [99, 199]
    """
    check_integer(step, "step")
    check_integer(interval, "interval")
    if step < 0 or interval < 1:
        raise ValueError(f"need step >= 0 and interval >= 1, got step={step}, interval={interval}")
    if first_search == "start":
        return step % interval == 0
    if first_search == "interval":
        return (step + 1) % interval == 0
    raise ValueError(f"first_search={first_search!r} must be 'start' or 'interval'")
