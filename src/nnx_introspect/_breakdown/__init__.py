"""What the peak is made of: the buffers live at it, classified, grouped and advised on.

``report`` holds :class:`Breakdown` and its rows (every buffer XLA's dump
shows live at the peak, with its kind, state path or source line);
``chart`` draws the memory curve and the peak by kind; ``advice`` states what
to change, facts only. The dump itself is read by ``_xla.dump``.
"""
