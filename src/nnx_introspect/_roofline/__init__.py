"""The step-time estimate: a roofline from the compiled program and the hardware.

``estimate`` builds :class:`Roofline` (compute, memory and per-axis
communication terms, a time range and an MFU ceiling), labelled an estimate,
from XLA's FLOPs, bytes accessed and collectives plus ``_accelerators``'
hardware figures; ``checks`` checks its inputs; ``program`` estimates a
compiled program's step on a named topology (what a step report shows);
``timing`` gives the point estimate a report plans on, from the program's
instructions at the device kind's calibrated rates.
"""

from nnx_introspect._roofline.estimate import LABEL as LABEL
from nnx_introspect._roofline.estimate import Roofline as Roofline
from nnx_introspect._roofline.program import POINT_LABEL as POINT_LABEL
from nnx_introspect._roofline.program import RANGE_WORDS as RANGE_WORDS
from nnx_introspect._roofline.program import program_roofline as program_roofline
from nnx_introspect._roofline.timing import same_time as same_time
