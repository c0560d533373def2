"""Many compiles of one step: the largest batch that fits and the mesh comparison.

``batch`` holds :func:`max_batch` (a search over the global batch, every point
kept; ``batch_search`` its result, :class:`BatchSearch`; ``sizes`` the sizes it
tries; the edge, probes and jumps all searches share are ``_size_search``'s)
and ``meshes`` :func:`compare_meshes` (one compile per candidate mesh, fanned
out over a ``concurrent.futures.Executor``, ranked). Each compile is one
:class:`~nnx_introspect.StepSpec`, varied with ``dataclasses.replace``,
measured by ``_step``.
"""

from nnx_introspect._search.batch import BatchSearch as BatchSearch
from nnx_introspect._search.batch import max_batch as max_batch
from nnx_introspect._search.fit import fit_step as fit_step
from nnx_introspect._search.meshes import MeshCandidate as MeshCandidate
from nnx_introspect._search.meshes import compare_meshes as compare_meshes
from nnx_introspect._search.meshes.candidates import named_axes as named_axes
from nnx_introspect._search.sizes import MAX_COMPILES as MAX_COMPILES
from nnx_introspect._search.sizes import bisect_sizes as bisect_sizes
