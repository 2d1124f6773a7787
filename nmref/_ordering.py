"""The sort key of the tie rule: scores from largest to smallest, compared exactly."""

from __future__ import annotations

__all__ = ["Descending"]


class Descending:
    """Sort key that orders scores from largest to smallest, comparing exactly.

    Python compares the wrapped NumPy or Python scalars themselves, so no cast to
    float ever decides an order (``sorted(..., key=lambda i: (Descending(s[i]), i))``
    puts the lower index first among equal scores).
    """

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return bool(self.value > other.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and bool(self.value == other.value)

    __hash__ = None  # type: ignore[assignment]
