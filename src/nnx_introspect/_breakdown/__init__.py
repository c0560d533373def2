"""What the peak is made of: the buffers live at it, classified, grouped and advised on.

``rows`` gives each buffer XLA's dump shows live at the peak its kind, state
path or source line (:class:`~nnx_introspect._breakdown.rows.BreakdownRow`);
``report`` holds :class:`~nnx_introspect._breakdown.report.Breakdown` (the
rows grouped, as a table and as JSON) and ``classify``, which makes it;
``chart`` draws the memory curve and the peak by kind; ``advice`` states what
to change, facts only. The dump itself is read by ``_xla.dump``.
"""
