"""Files: reading and writing tensors and model folders, and the plumbing around them.

Kept apart from the algorithms (networkx keeps ``readwrite/`` beside ``algorithms/``): a reader
who opens :mod:`nmref` to learn an algorithm meets algorithms first.

:mod:`~nmref.io.checkpoints`
    ``.npy``, ``.npz``, ``.safetensors`` and ``.pt`` files: validated listing and reading, one
    tensor at a time, and atomic writing (``specs/checkpoint_formats.md``).
:mod:`~nmref.io.sharded`
    Hugging Face model folders and ``*.safetensors.index.json``: read shard by shard, written
    as one set.
:mod:`~nmref.io.safetensors_writer`
    A ``.safetensors`` file streamed tensor by tensor from a plan of its header.
:mod:`~nmref.io.output`
    The safe writer every command uses: never over an input, never a half-written file.
:mod:`~nmref.io.selection`
    Which tensors ``nmref mask``, ``nmref audit`` and ``nmsim report`` select by default
    (embedding tables only with ``--embeddings``).
:mod:`~nmref.io.distributed`
    The same masks computed on a Dask cluster, in row bands.
:mod:`~nmref.io.workers`
    How many worker processes a command starts: at most the usable cores.
:mod:`~nmref.io.progress`, :mod:`~nmref.io.compile_notice`
    What a long command prints while it works.
:mod:`~nmref.io.narrow_floats`
    Float8 and float4 codes (``F8_E4M3``, ``F8_E5M2``, ``F4``, ...) as their exact float32 values.
:mod:`~nmref.io.printable`
    Names from files, with control characters escaped, for a terminal, a table or a plot.

Nothing here is imported by ``import nmref``.
"""
