"""The schedule each training method owns: when its masks are refreshed, with the papers' defaults.

A sparse layer counts the optimizer steps taken on its weight (``nm_step``) and refreshes its
masks on that count (``specs/training.md`` §2):

===============  =================  ==========================================================
method           refresh interval   source of the default
===============  =================  ==========================================================
``"ste"``        1                  the mask of the current weights at every step (STE)
``"srste"``      1                  Zhou et al. 2021, Sec. 4: the mask is recomputed at every
                                    iteration from the dense weights
``"transposable"`` 40               Hubara et al. 2021, code: ``freq = 40`` forward calls
                                    between mask computations (``SparseConvTranspose``)
``"bimask"``     1 (F and B);       Zhang et al. 2023, code: F and B every iteration, the row
                 permutation 100,   permutation every ``--iter 100`` iterations, best of
                 10 candidates      ``--greedy_num 10`` random ones (100 in the README runs)
``"bame"``       its ``BameConfig`` BAME's own schedule: update interval, ``t_i``, ``t_f``
                                    (``specs/bame.md`` §3.5)
===============  =================  ==========================================================

The transposable 40 is the paper's for ImageNet runs (~0.01% of a run). In a short run, or at
large M, a stale transposable mask can derail training: digits CNN 1:16 collapsed at 40 and
trained at 1 (``specs/training.md`` §2 and Appendix A); pass ``refresh_interval=1`` there.
"""

from __future__ import annotations

from dataclasses import dataclass

from nmref._validation import check_choice, check_count

__all__ = [
    "BIMASK_CANDIDATES",
    "BIMASK_PERMUTATION_INTERVAL",
    "DEFAULT_BACKWARD_LIMIT",
    "REFRESH_INTERVALS",
    "TRANSPOSABLE_FILLS",
    "TRANSPOSABLE_SOLVERS",
    "MethodSchedule",
]

#: Optimizer steps between mask refreshes, per method (the papers' defaults, table above).
REFRESH_INTERVALS = {"ste": 1, "srste": 1, "transposable": 40, "bimask": 1, "bame": 1}
#: Bi-Mask's permutation-search interval T and candidate count K (the authors' code defaults).
BIMASK_PERMUTATION_INTERVAL = 100
BIMASK_CANDIDATES = 10
#: ``"exact"``: the optimal transposable mask (min-cost flow); ``"greedy"``: the paper's
#: 2-approximation (``specs/transposable.md`` T8).
TRANSPOSABLE_SOLVERS = ("exact", "greedy")
#: ``"exact"``: exactly n per row and column of every tile; ``"at_most"``: the best mask with at
#: most n (what sparse hardware accepts, ``specs/transposable.md`` T6).
TRANSPOSABLE_FILLS = ("exact", "at_most")
#: Gradient accumulations into a sparse weight without an optimizer step before a layer
#: refuses to go on (a weight left out of every optimizer would never train as its method says).
DEFAULT_BACKWARD_LIMIT = 1000


def _positive(value: object, name: str) -> int:
    return check_count(value, name, minimum=1)


@dataclass(frozen=True)
class MethodSchedule:
    """When a sparse layer refreshes its masks; every count is in optimizer steps.

    Build it with ``MethodSchedule.for_method``, which fills the method's defaults and validates.
    """

    method: str
    refresh_interval: int
    permutation_interval: int | None = None
    permutation_candidates: int | None = None
    transposable_solver: str = "exact"
    transposable_fill: str = "exact"
    backward_limit: int = DEFAULT_BACKWARD_LIMIT

    @classmethod
    def for_method(
        cls,
        method: str,
        *,
        refresh_interval: int | None = None,
        permutation_interval: int | None = None,
        permutation_candidates: int | None = None,
        transposable_solver: str = "exact",
        transposable_fill: str = "exact",
        backward_limit: int = DEFAULT_BACKWARD_LIMIT,
    ) -> MethodSchedule:
        """The schedule of ``method`` with its defaults; ``None`` keeps a default.

        Raises
        ------
        ValueError
            An interval, count or limit < 1; a setting given to a method that has no use for
            it (``permutation_*`` other than ``"bimask"``, ``transposable_*`` other than
            ``"transposable"``, ``refresh_interval`` with ``"bame"``, whose ``BameConfig``
            schedules it); an unknown solver or fill.
        """
        if method != "bimask" and (
            permutation_interval is not None or permutation_candidates is not None
        ):
            raise ValueError(
                f"permutation_interval and permutation_candidates are Bi-Mask settings, not "
                f"used by method={method!r}"
            )
        if method != "transposable" and (
            transposable_solver != "exact" or transposable_fill != "exact"
        ):
            raise ValueError(
                f"transposable_solver and transposable_fill are settings of "
                f"method='transposable', not used by method={method!r}"
            )
        if method == "bame" and refresh_interval is not None:
            raise ValueError(
                "refresh_interval is not used by method='bame': its mask evolves on the "
                "schedule of bame_config (update interval, t_i, t_f; specs/bame.md §3.5)"
            )
        check_choice(transposable_solver, "transposable_solver", TRANSPOSABLE_SOLVERS)
        check_choice(transposable_fill, "transposable_fill", TRANSPOSABLE_FILLS)
        if transposable_solver == "greedy" and transposable_fill == "at_most":
            # The 2-approximation keeps at most n by construction; the fill names the optimum.
            raise ValueError(
                "transposable_fill='at_most' selects the at-most optimum of the exact solver; "
                "the greedy 2-approximation keeps at most n already (use fill='exact' with it)"
            )
        interval = REFRESH_INTERVALS[method] if refresh_interval is None else refresh_interval
        if method == "bimask":
            permutation_interval = _positive(
                BIMASK_PERMUTATION_INTERVAL if permutation_interval is None
                else permutation_interval,
                "permutation_interval",
            )  # fmt: skip
            permutation_candidates = _positive(
                BIMASK_CANDIDATES if permutation_candidates is None else permutation_candidates,
                "permutation_candidates",
            )
        return cls(
            method,
            _positive(interval, "refresh_interval"),
            permutation_interval,
            permutation_candidates,
            transposable_solver,
            transposable_fill,
            _positive(backward_limit, "backward_limit"),
        )

    def refreshes_at(self, step: int) -> bool:
        """Whether the masks used at optimizer step ``step`` are computed afresh."""
        return step % self.refresh_interval == 0

    def searches_at(self, step: int) -> bool:
        """Bi-Mask: whether the row permutation is searched before step ``step``
        (``nmref.bimask.is_search_step``, ``first_search="start"``: steps 0, T, 2T, ...)."""
        return self.permutation_interval is not None and step % self.permutation_interval == 0
