r"""The sufficient statistics of a layer's calibration inputs, accumulated in batches (spec A5).

Every quantity AdaPrune's exact form needs from the inputs ``X`` (``[samples, in]``) is a
function of three statistics: the sample count ``S``, the mean ``mu`` and the scatter
matrix (the centred Gram matrix)

.. math::

    M_2 = \sum_s (x_s - \mu)(x_s - \mu)^\top, \qquad
    X^\top X = M_2 + S\,\mu\mu^\top, \qquad X^\top \mathbf 1 = S\mu .

They are kept in that form rather than as raw moments because the bias re-fit needs
``M_2`` itself, and ``X^T X - (X^T 1)(X^T 1)^T / S`` loses the digits the mean shares with
the data (catastrophic cancellation); batches are merged by Chan, Golub and LeVeque's
pairwise update, whose error grows like the number of merges, not the number of samples.
Memory: ``in**2 + in + 1`` float64 numbers, whatever ``S``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from nmref._validation import check_count
from nmref.adaprune._inputs import as_inputs, check_finite

__all__ = ["InputGram", "as_gram"]


@dataclass(frozen=True, eq=False)
class InputGram:
    """Count, mean and scatter matrix of calibration inputs ``[samples, in]`` (float64).

    Build it from all inputs at once (:meth:`~nmref.adaprune.InputGram.of`), or stream
    batches into an empty one (:meth:`~nmref.adaprune.InputGram.empty`,
    :meth:`~nmref.adaprune.InputGram.add`) or merge statistics gathered elsewhere
    (:meth:`~nmref.adaprune.InputGram.merge`);
    the three give the same statistics up to rounding. Every AdaPrune function that takes
    ``calibration`` accepts an ``InputGram`` where the inputs themselves are not needed
    (all but the Adam form).

    Attributes
    ----------
    count : int
        Samples seen, ``S``.
    mean : ndarray of float64, shape (in,)
        ``mu``, the mean input (zeros when ``count == 0``).
    scatter : ndarray of float64, shape (in, in)
        ``M2 = sum_s (x_s - mu)(x_s - mu)^T``, symmetric positive semi-definite up to
        rounding.

    Examples
    --------
    >>> x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    >>> stats = InputGram.empty(2).add(x[:2]).add(x[2:])
    >>> stats.count, stats.mean.tolist()
    (3, [3.0, 2.0])
    >>> stats.gram.tolist() == (x.T @ x).tolist()
    True
    """

    count: int
    mean: NDArray[np.float64]
    scatter: NDArray[np.float64]

    # ------------------------------------------------------------------ builders

    @classmethod
    def empty(cls, in_features: int) -> InputGram:
        """Statistics of no samples, ready for :meth:`~nmref.adaprune.InputGram.add`."""
        size = check_count(in_features, "in_features")
        return cls(0, np.zeros(size), np.zeros((size, size)))

    @classmethod
    def of(cls, inputs: ArrayLike) -> InputGram:
        """Statistics of ``inputs`` ``[samples, in]`` (real, finite, at least one sample)."""
        array = as_inputs(inputs, None, "inputs")
        mean = array.mean(axis=0)
        centred = array - mean
        return cls(array.shape[0], mean, centred.T @ centred)

    @classmethod
    def from_moments(cls, gram: ArrayLike, total: ArrayLike, count: int) -> InputGram:
        """Statistics from raw moments ``X^T X``, ``X^T 1`` and ``S`` (float64).

        For callers that accumulated raw sums themselves. The scatter matrix is
        ``gram - outer(total, total) / count``, which cancels the digits the mean shares
        with the data: prefer :meth:`~nmref.adaprune.InputGram.add` when the inputs pass
        through your hands.
        """
        samples = check_count(count, "count")
        gram_array = np.asarray(gram, dtype=np.float64)
        total_array = np.asarray(total, dtype=np.float64)
        if gram_array.ndim != 2 or gram_array.shape[0] != gram_array.shape[1]:
            raise ValueError(f"gram must be a square [in, in] matrix, got {gram_array.shape}")
        if total_array.shape != (gram_array.shape[0],):
            raise ValueError(
                f"total must have shape ({gram_array.shape[0]},) (X^T 1 of the gram's inputs), "
                f"got {total_array.shape}"
            )
        check_finite(gram_array, "gram")
        check_finite(total_array, "total")
        if samples == 0:
            if gram_array.any() or total_array.any():
                raise ValueError("count=0 but gram or total is nonzero: no samples, no sums")
            return cls.empty(gram_array.shape[0])
        mean = total_array / samples
        scatter = gram_array - np.outer(total_array, total_array) / samples
        return cls(samples, mean, (scatter + scatter.T) / 2)

    # ------------------------------------------------------------------ streaming

    def add(self, inputs: ArrayLike) -> InputGram:
        """These statistics with a batch of inputs ``[batch, in]`` added (a new object).

        A batch with 0 rows adds nothing.
        """
        array = np.asarray(inputs)
        if array.ndim == 2 and array.shape[0] == 0 and array.shape[1] == self.in_features:
            return self
        batch = as_inputs(array, self.in_features, "inputs")
        return self.merge(InputGram.of(batch))

    def merge(self, other: InputGram) -> InputGram:
        """The statistics of both sample sets (Chan, Golub and LeVeque's pairwise update)."""
        if not isinstance(other, InputGram):
            raise TypeError(f"other must be an InputGram, got {type(other).__name__}")
        if other.in_features != self.in_features:
            raise ValueError(
                f"cannot merge statistics of {other.in_features} features into statistics "
                f"of {self.in_features}"
            )
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        shift = other.mean - self.mean
        mean = self.mean + shift * (other.count / count)
        scatter = (
            self.scatter
            + other.scatter
            + np.outer(shift, shift) * (self.count * other.count / count)
        )
        return InputGram(count, mean, scatter)

    # ------------------------------------------------------------------ views

    @property
    def in_features(self) -> int:
        """``in``, the number of features per sample."""
        return int(self.mean.shape[0])

    @property
    def gram(self) -> NDArray[np.float64]:
        """``X^T X = M2 + S mu mu^T``."""
        return self.scatter + self.count * np.outer(self.mean, self.mean)

    @property
    def total(self) -> NDArray[np.float64]:
        """``X^T 1 = S mu``."""
        return self.count * self.mean


def as_gram(calibration: ArrayLike | InputGram, in_features: int) -> InputGram:
    """``calibration`` (inputs ``[samples, in]`` or an :class:`InputGram`) as statistics.

    ``ValueError`` when the feature size differs from the weight's ``in`` or there are no
    samples: the one message per rule of :mod:`nmref.adaprune._inputs`.
    """
    if isinstance(calibration, InputGram):
        if calibration.in_features != in_features:
            raise ValueError(
                f"calibration has {calibration.in_features} features per sample but the "
                f"weight has in={in_features}: calibration inputs are [samples, in] for a "
                "weight [out, in]"
            )
        if calibration.count == 0:
            raise ValueError(
                "calibration is empty (0 samples): reconstruction needs at least one sample"
            )
        check_finite(calibration.mean, "calibration.mean")
        check_finite(calibration.scatter, "calibration.scatter")
        return calibration
    return InputGram.of(as_inputs(calibration, in_features))
