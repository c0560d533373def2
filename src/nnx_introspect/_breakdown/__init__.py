"""What the peak is made of: the buffers live at it, classified, grouped and advised on.

``rows`` gives each buffer XLA's dump shows live at the peak its kind, state
path or source line (:class:`~nnx_introspect._breakdown.rows.BreakdownRow`);
``report`` holds :class:`~nnx_introspect._breakdown.report.Breakdown` (the
rows grouped, as a table and as JSON) and ``classify``, which makes it;
``chart`` draws the memory curve and the peak by kind; ``advice`` states what
to change, facts only. The dump itself is read by ``_xla.dump``.
"""

from nnx_introspect._breakdown.advice import what_to_change as what_to_change
from nnx_introspect._breakdown.chart import advice_html as advice_html
from nnx_introspect._breakdown.chart import breakdown_html as breakdown_html
from nnx_introspect._breakdown.report import ArgumentLeaf as ArgumentLeaf
from nnx_introspect._breakdown.report import Breakdown as Breakdown
from nnx_introspect._breakdown.report import BreakdownRow as BreakdownRow
from nnx_introspect._breakdown.report import classify as classify
