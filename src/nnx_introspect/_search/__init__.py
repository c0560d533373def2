"""Many compiles of one step: the largest batch that fits and the mesh comparison.

``batch`` holds :func:`max_batch` (a search over the global batch, every point
kept) and ``meshes`` :func:`compare_meshes` (one compile per candidate mesh,
fanned out over a ``concurrent.futures.Executor``, ranked). Each compile is one
:func:`step_memory_report` of ``_step``.
"""
