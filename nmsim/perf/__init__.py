"""nmsim.perf: the performance model of sparse tensor-core training.

``hardware`` (the GPU database), ``gemm`` (one GEMM's time), ``flops`` (training
FLOPs per GEMM and method), ``models`` (the layers of a network), ``estimate``
(one training step's time) and ``calibration`` (fitting ``gemm``'s parameters to
measured times). The names users need are exported by :mod:`nmsim` itself.
"""
