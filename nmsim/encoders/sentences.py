"""English sentences available offline, split into calibration and held-out sets.

AdaPrune needs a layer's inputs on real text, and the figures it prints need text the
calibration never saw. The source is the Python help text, ``pydoc_data.topics``: the
Language Reference's sections that ``help("for")`` prints, shipped with every CPython in its
standard library (so the same text is there wherever ``nmsim`` runs, CI and a laptop without
network alike), written and edited by people as complete English sentences, about 65,000
words in 79 topics (CPython 3.11). It is technical prose, not news or fiction: the domain
of the StackExchange and S2ORC pairs that are a large part of all-MiniLM-L6-v2's training
data (its model card), which makes it fairer calibration text for that model than license
texts (one legal register, few distinct sentences) or docstrings (fragments, code). It is
not representative of conversational English; a caller with better text passes its own
sentences to :func:`nmsim.encoders.minilm.layer_inputs`.

Selection (deterministic for a given Python version; the text changes between versions):

1. Every topic's text is cut into paragraphs at blank lines; a paragraph with an indented
   line (code, grammar productions, tables) or that is a heading (underlined with ``*``,
   ``=``, ``-``) is dropped, the rest is joined into one line.
2. Paragraphs are cut into sentences after ``.``, ``?`` or ``!`` followed by white space and
   an upper-case letter, except after the abbreviations "e.g.", "i.e.", "etc.", "cf.",
   "vs.".
3. A sentence is kept when it starts with an upper-case letter, ends with ``.``, ``?`` or
   ``!``, has 6 to 64 words, at least 75% of its non-space characters are letters, and it
   holds no ``>>>`` or ``::=`` (interactive sessions and grammar). A sentence is kept
   once, in the first topic (in name order) that has it.
4. Topics whose name's CRC-32 is divisible by 5 are the held-out topics: the split is by
   topic, so no paragraph is cut between the two sets, it does not move when Python adds
   a topic, and (step 3) the sets share no sentence.
5. Each set is ordered round-robin over its topics in name order (the first sentence of
   every topic, then the second, ...), so that the first ``count`` sentences cover many
   topics.

With CPython 3.11.7 this gives 895 calibration sentences from 64 topics and 233 held-out
sentences from 15 (``attribute-access``, ``await``, ``binary``, ``bitwise``,
``context-managers``, ``floating``, ``formatstrings``, ``import``, ``lists``, ``nonlocal``,
``operator-summary``, ``power``, ``specialattrs``, ``string-methods``, ``strings``).
"""

from __future__ import annotations

import functools
import re
import zlib

from nmref._validation import check_choice, check_count

__all__ = ["SPLITS", "calibration_sentences"]

#: The two disjoint sets of :func:`calibration_sentences`.
SPLITS: tuple[str, ...] = ("calibration", "heldout")

_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "cf.", "vs.")
# A sentence ends after . ? or ! when white space and an upper-case letter follow.
_BOUNDARY = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_HEADING_RULE = re.compile(r"^[*=\-~^]{3,}$")
_MIN_WORDS, _MAX_WORDS = 6, 64
_MIN_LETTER_FRACTION = 0.75
_HELDOUT_MODULUS = 5


def _paragraphs(text: str) -> list[str]:
    """Prose paragraphs of one help topic, each joined into one line (step 1)."""
    kept = []
    for block in re.split(r"\n[ \t]*\n", text):
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines or any(line[0] in " \t" for line in lines):
            continue
        if any(_HEADING_RULE.match(line.strip()) for line in lines):
            continue
        kept.append(" ".join(line.strip() for line in lines))
    return kept


def _split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph, not cut after an abbreviation (step 2)."""
    sentences: list[str] = []
    for piece in _BOUNDARY.split(paragraph):
        if sentences and sentences[-1].endswith(_ABBREVIATIONS):
            sentences[-1] = f"{sentences[-1]} {piece}"
        else:
            sentences.append(piece)
    return sentences


def _is_prose(sentence: str) -> bool:
    """Step 3: a complete sentence of words, not code or a grammar rule."""
    if not sentence[:1].isupper() or sentence[-1:] not in ".?!":
        return False
    if ">>>" in sentence or "::=" in sentence:
        return False
    if not _MIN_WORDS <= len(sentence.split()) <= _MAX_WORDS:
        return False
    visible = [character for character in sentence if not character.isspace()]
    letters = sum(character.isalpha() for character in visible)
    return letters >= _MIN_LETTER_FRACTION * len(visible)


def _round_robin(per_topic: list[list[str]]) -> list[str]:
    ordered = []
    for index in range(max((len(sentences) for sentences in per_topic), default=0)):
        ordered += [sentences[index] for sentences in per_topic if index < len(sentences)]
    return ordered


@functools.cache
def _corpus() -> dict[str, tuple[str, ...]]:
    """Both sets, built once per process (steps 1-5)."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    by_split: dict[str, list[list[str]]] = {split: [] for split in SPLITS}
    for name in sorted(topics):
        split = "heldout" if zlib.crc32(name.encode()) % _HELDOUT_MODULUS == 0 else "calibration"
        sentences = []
        for paragraph in _paragraphs(topics[name]):
            for sentence in _split_sentences(paragraph):
                if _is_prose(sentence) and sentence not in seen:
                    seen.add(sentence)
                    sentences.append(sentence)
        by_split[split].append(sentences)
    return {split: tuple(_round_robin(by_split[split])) for split in SPLITS}


def calibration_sentences(count: int | None = None, split: str = "calibration") -> list[str]:
    """The first ``count`` English sentences of the calibration or the held-out set.

    Parameters
    ----------
    count : int, optional
        How many (``>= 1``); default all of the set.
    split : {"calibration", "heldout"}, default "calibration"
        The two sets share no sentence and no help topic (module docstring, step 4).

    Returns
    -------
    list of str
        Sentences in the set's round-robin order; the same list on every call with the
        same Python version.

    Raises
    ------
    ValueError
        For an unknown ``split``, a ``count`` that is not an integer ``>= 1``, or larger
        than the set (the message says how many there are).

    Notes
    -----
    The text is CPython's ``pydoc_data.topics`` (module docstring: why, and the selection
    rules). Built once per process, in about 0.1 s; then O(count).

    Examples
    --------
    >>> first = calibration_sentences(3)
    >>> len(first), all(sentence.endswith((".", "?", "!")) for sentence in first)
    (3, True)
    >>> set(first).isdisjoint(calibration_sentences(split="heldout"))
    True
    """
    check_choice(split, "split", SPLITS)
    sentences = _corpus()[split]
    if count is None:
        return list(sentences)
    wanted = check_count(count, "count", minimum=1)
    if wanted > len(sentences):
        raise ValueError(
            f"count={wanted} is more than the {len(sentences)} sentences of the {split!r} set"
        )
    return list(sentences[:wanted])
