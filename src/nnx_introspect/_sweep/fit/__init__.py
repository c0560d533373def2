"""Make it fit: the fastest configuration of one step that fits its budget.

``search`` holds :func:`fit_step` (meshes x remat choices x microbatch counts,
compiled in stages on an executor, pruned by what each stage showed), ``layers``
the choice of the layer to rematerialise (from a failing compile's breakdown)
and ``report`` :class:`FitSearch` and its :class:`FitRow` rows.
"""

from nnx_introspect._sweep.fit.report import FitRow as FitRow
from nnx_introspect._sweep.fit.report import FitSearch as FitSearch
from nnx_introspect._sweep.fit.search import fit_step as fit_step

__all__ = ["FitRow", "FitSearch", "fit_step"]
