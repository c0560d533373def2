"""Many compiles of one step: the largest batch that fits, the mesh comparison, the fit.

One word per idea: a *size search* finds the largest size whose compile fits
(``batch``: :func:`max_batch` in ``batch/search.py``, its answer
:class:`BatchSearch` in ``batch/answer.py``, the sizes it tries in
``batch/sizes.py``; the edge, probes and jumps every size search shares are
``_size_search``'s); a *mesh comparison* ranks candidate meshes
(``mesh_comparison``: :func:`compare_meshes`, one compile per mesh fanned out
over a ``concurrent.futures.Executor``); ``fit`` searches the changes that make
a step fit. Each compile is one :class:`~nnx_introspect.StepSpec`, varied with
``dataclasses.replace``, measured by ``_step``.
"""

from nnx_introspect._sweep.batch.search import BatchSearch as BatchSearch
from nnx_introspect._sweep.batch.search import max_batch as max_batch
from nnx_introspect._sweep.batch.sizes import MAX_COMPILES as MAX_COMPILES
from nnx_introspect._sweep.batch.sizes import bisect_sizes as bisect_sizes
from nnx_introspect._sweep.fit import fit_step as fit_step
from nnx_introspect._sweep.mesh_comparison import MeshCandidate as MeshCandidate
from nnx_introspect._sweep.mesh_comparison import compare_meshes as compare_meshes
from nnx_introspect._sweep.mesh_comparison.candidates import named_axes as named_axes
