"""Many compiles of one step: the largest batch that fits and the mesh comparison.

``batch`` holds :func:`max_batch` (a search over the global batch, every point
kept; ``sizes`` the sizes it tries) and ``meshes`` :func:`compare_meshes` (one
compile per candidate mesh, fanned out over a ``concurrent.futures.Executor``,
ranked). Each compile is one :class:`~nnx_introspect.StepSpec`, varied with
``dataclasses.replace``, measured by ``_step``.
"""
