"""Accelerators as data: named TPU and GPU slices, their hardware figures and budgets.

``topology`` holds one row per family (how a name such as ``v5e-256`` or
``h100-8`` becomes a slice: device count, shape, memory, the compiler's
topology and config); ``hardware`` the roofline figures of each chip (peak
FLOP/s per dtype, HBM and link bandwidths), each with its source; ``budget``
the memory a run really gets there (a GPU's allocator share, a TPU's usable
HBM). Adding a family is adding data, not code; nothing here imports jax at
module level or starts a compiler.
"""
