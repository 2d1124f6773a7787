"""Masks of a whole model on a ``dask.distributed`` cluster, identical to one process.

``nmref mask --scheduler ADDRESS`` (an existing cluster) or ``--workers N`` (a local
cluster of N single-threaded worker processes) sends the per-tensor work to Dask
workers; the client keeps the order and writes every output itself, so a retried task
can neither lose nor duplicate a tensor in the output (``specs/report.md``, "Work on a
cluster").

**Row bands.** A tensor larger than ``band_elements`` whose layout is ``linear`` (the
2-D ``[out, in]`` weights of Linear layers, every GEMM weight of an LLM) is split into
bands of whole rows of its ``[rows, reduction]`` matrix, each a multiple of ``m`` rows:
a band holds whole N:M groups (1-D masks choose within a group of one row) and whole
M x M tiles (transposable masks choose within a tile). Each band's mask is therefore
the same bits as those rows of the whole tensor's mask, and the client concatenates
the bands in order. Any other tensor (convolutions, small weights) is one task.

**Failures.** Every task is submitted with ``retries`` (a task whose worker dies, or
that raises, runs again elsewhere); tasks are pure functions of their inputs (they
read the tensor from its file, by path: workers must see the same files), so a rerun
gives the same bits. A task that still fails after its retries is recomputed on the
client, so that its error message is exactly the single-process one.

Needs the optional ``dask`` extra (``pip install 'nm-sparsity-ref[dask]'``).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from nmref.io.checkpoints import read_tensor, read_tensor_rows
from nmref.layouts import default_layout, from_reduction_matrix

__all__ = ["BAND_ELEMENTS", "MaskOptions", "dask_client", "distributed_masks", "row_bands"]

#: A tensor with more elements than this is split into row bands (64 MiB of float32).
BAND_ELEMENTS = 16 * 2**20
#: Times a failed task runs again before the client computes it itself.
RETRIES = 3


@dataclass(frozen=True)
class MaskOptions:
    """What ``nmref mask`` computes for each tensor (picklable, sent to workers)."""

    n: int
    m: int
    layout: str  # "auto" or one of nmref.LAYOUTS
    transposable: bool
    method: str
    remainder: str

    def resolved(self, ndim: int) -> str:
        """The layout of a tensor of ``ndim`` dimensions."""
        return default_layout(ndim) if self.layout == "auto" else self.layout


@contextlib.contextmanager
def dask_client(scheduler: str | None, workers: int) -> Iterator[Any]:
    """A ``distributed.Client``: to ``scheduler`` (an address), or a local cluster.

    ``scheduler="local"`` or None starts a ``LocalCluster`` of ``workers`` worker
    processes (at most the usable cores, :mod:`nmref.io.workers`) with one thread each
    (Numba kernels hold the GIL), on the loopback interface;
    ``"local-threads"`` runs them as threads in this process (tests: fast to start).

    Raises
    ------
    ImportError
        Without dask.distributed, naming the extra to install.
    ValueError
        If ``workers < 1``.
    """
    if workers < 1:
        raise ValueError(f"--workers {workers} must be >= 1")
    try:
        from distributed import Client, LocalCluster
    except ImportError as error:
        raise ImportError(
            "--scheduler/--workers need dask.distributed: pip install 'nm-sparsity-ref[dask]'"
        ) from error
    if scheduler in (None, "local", "local-threads"):
        from nmref.io.workers import usable_cores

        # never more local workers than cores (the command line says so when it cuts)
        workers = min(workers, usable_cores())
        processes = scheduler != "local-threads"
        # worker processes talk over the loopback interface only (threads: in process);
        # the dashboard on a free port, so that a taken 8787 is no error
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address="127.0.0.1:0",
            **({"host": "127.0.0.1"} if processes else {}),
        )
        with cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as error:
        raise OSError(f"--scheduler {scheduler!r}: cannot connect: {error}") from None
    with client:
        yield client


def row_bands(
    shape: tuple[int, ...], options: MaskOptions, band_elements: int = BAND_ELEMENTS
) -> list[tuple[int, int]] | None:
    """Row ranges ``[start, stop)`` of the ``[rows, reduction]`` matrix, or None (one task).

    Only ``linear`` 2-D tensors over ``band_elements`` with ``rows % m == 0`` are split;
    every band is a multiple of ``m`` rows (whole groups and whole tiles).
    """
    if len(shape) != 2 or options.resolved(2) != "linear":
        return None
    rows, reduction = int(shape[0]), int(shape[1])
    if rows * reduction <= band_elements or rows % options.m or reduction == 0:
        return None
    band = max(options.m, (band_elements // reduction) // options.m * options.m)
    return [(start, min(start + band, rows)) for start in range(0, rows, band)]


def tensor_mask(path: str, name: str, options: MaskOptions) -> NDArray[np.bool_]:
    """The mask of one whole tensor, as ``nmref mask`` computes it in one process."""
    from nmref.masks import magnitude_mask

    array = read_tensor(path, name).array
    layout = options.resolved(array.ndim)
    if options.transposable:
        from nmref.transposable import transposable_weight_mask

        return transposable_weight_mask(
            array, options.n, options.m, layout=layout, method=options.method
        )
    return magnitude_mask(array, options.n, options.m, layout=layout, remainder=options.remainder)


def band_mask(path: str, name: str, band: tuple[int, int], options: MaskOptions) -> NDArray:
    """The mask of rows ``band`` of a ``linear`` tensor's matrix (the same bits as those
    rows of :func:`tensor_mask`)."""
    from nmref.masks import magnitude_mask

    start, stop = band
    rows = read_tensor_rows(path, name, start, stop).array  # only the band is read
    if options.transposable:
        from nmref.transposable import transposable_weight_mask

        return transposable_weight_mask(
            rows, options.n, options.m, layout="linear", method=options.method
        )
    return magnitude_mask(rows, options.n, options.m, layout="linear", remainder=options.remainder)


class Refused:
    """A task's input was refused (``ValueError``/``TypeError``): not worth a retry."""

    def __init__(self, error: Exception) -> None:
        self.message = str(error)


def _run(
    task: tuple[str, str, tuple[int, int] | None, MaskOptions],
) -> NDArray[np.bool_] | Refused:
    """One task on a worker: a whole tensor (``band`` None) or one row band of it."""
    path, name, band, options = task
    try:
        if band is None:
            return tensor_mask(path, name, options)
        return band_mask(path, name, band, options)
    except (ValueError, TypeError) as error:
        # the same input fails the same way anywhere: returned, so Dask does not retry it
        return Refused(error)


def distributed_masks(
    client: Any,
    tensors: Sequence[tuple[str, str, tuple[int, ...]]],
    options: MaskOptions,
    *,
    band_elements: int = BAND_ELEMENTS,
    in_flight: int | None = None,
    task: Callable[[tuple], NDArray] | None = None,
) -> Iterator[tuple[str, NDArray[np.bool_]]]:
    """Yield ``(name, mask)`` for ``tensors`` (``(path, name, shape)``), in their order.

    Parameters
    ----------
    client : distributed.Client
    tensors : sequence of (path, name, shape)
        The tensors to mask, each read by the worker from ``path``.
    options : MaskOptions
    band_elements : int
        Tensors larger than this are split into row bands (:func:`row_bands`).
    in_flight : int, optional
        Tasks submitted ahead of the one being collected (default 2 per worker): memory
        on the client is bounded by that many results.
    task : callable, optional
        The function run per task (default the module's; tests wrap it to inject
        failures).

    Notes
    -----
    A task that fails after :data:`RETRIES` reruns is computed here, in this process,
    so that the error raised is the one-process error.
    """
    run = task or _run
    workers = max(len(client.scheduler_info().get("workers", {})), 1)
    limit = in_flight or 2 * workers
    planned: list[tuple[str, str, tuple[int, int] | None, tuple[int, ...]]] = []
    for path, name, shape in tensors:
        bands = row_bands(tuple(shape), options, band_elements)
        for band in bands or [None]:
            planned.append((path, name, band, tuple(shape)))
    pending: deque[tuple[Any, tuple]] = deque()
    next_task = 0
    current: str | None = None
    parts: list[NDArray] = []

    def submit_more() -> None:
        nonlocal next_task
        while next_task < len(planned) and len(pending) < limit:
            path, name, band, _ = planned[next_task]
            payload = (path, name, band, options)
            future = client.submit(run, payload, retries=RETRIES, pure=False)
            pending.append((future, planned[next_task]))
            next_task += 1

    def finish(name: str, shape: tuple[int, ...], banded: bool) -> tuple[str, NDArray]:
        if not banded:
            return name, parts[0]
        matrix = np.concatenate(parts, axis=0)
        return name, from_reduction_matrix(matrix, shape, "linear")

    submit_more()
    current_shape: tuple[int, ...] = ()
    current_banded = False
    while pending:
        future, (path, name, band, shape) = pending.popleft()
        try:
            result = future.result()
        except Exception:  # its retries spent (a worker lost each time, or a crash)
            result = None
        finally:
            future.release()
        if result is None or isinstance(result, Refused):
            # computed here, whole: the one-process error, word for word (or the result)
            whole = tensor_mask(path, name, options)
            result = whole if band is None else whole[band[0] : band[1]]
        submit_more()
        if current is not None and name != current:
            yield finish(current, current_shape, current_banded)
            parts = []
        current, current_shape, current_banded = name, shape, band is not None
        parts.append(result)
    if current is not None:
        yield finish(current, current_shape, current_banded)
