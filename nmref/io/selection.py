"""Which tensors of a checkpoint the commands select by default: one rule, one place.

``nmref mask``, ``nmref audit`` and ``nmsim report`` all select the GEMM weights of a model and
leave out embedding tables unless asked for them (``--embeddings``): an embedding table is 2-D but
is looked up, not multiplied, so there is no GEMM to sparsify, and its shape (a vocabulary of any
size, a token-type table of 2 rows) often fits no N:M tile. The name filters
(``--include``/``--exclude``) apply before this rule.
"""

from __future__ import annotations

import re

__all__ = ["EMBEDDING_NAME", "EMBEDDING_REASON", "embedding_skip_reason", "is_embedding"]

#: Names of embedding tables: any name that contains ``embed``, in any case (``embed_tokens``,
#: ``word_embeddings``); a table named otherwise (GPT-2's ``wte``) is left out with ``--exclude``.
EMBEDDING_NAME = re.compile(r"embed", re.IGNORECASE)

#: Why an embedding table is left out, and the flag that selects it.
EMBEDDING_REASON = "embedding table, a lookup and not a GEMM; --embeddings selects it"


def is_embedding(name: str) -> bool:
    """Whether the tensor called ``name`` is an embedding table by the default rule."""
    return EMBEDDING_NAME.search(name) is not None


def embedding_skip_reason(name: str, *, embeddings: bool) -> str | None:
    """Why the default selection leaves ``name`` out, or ``None`` when it selects it.

    ``embeddings=True`` (the commands' ``--embeddings``) selects embedding tables too.
    """
    if not embeddings and is_embedding(name):
        return EMBEDDING_REASON
    return None
