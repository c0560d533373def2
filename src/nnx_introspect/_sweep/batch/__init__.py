"""The largest global batch whose compiled step fits.

The search (``search``), the sizes it tries (``sizes``) and its answer
(``answer``).
"""
