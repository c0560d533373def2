"""The one parser of XLA's HLO text: shapes, bytes, instructions, metadata, frames.

Everything in ``_xla`` that reads a compiled program's text (the collectives,
the dumps' buffers, the matmul dtype) reads it through here, so one table of
element widths and one reading of a shape, an instruction line, its metadata
and the module's stack-frame index serve them all. The format is XLA's text
printer (``HloInstruction::ToString``, ``ShapeUtil::HumanStringWithLayout``,
``HloModule::ToString``) as the pinned jaxlib 0.10.2 and libtpu 0.0.52 write
it; what does not parse raises :class:`HloTextError` naming the piece, and
each reader turns that into its own error.

The modules: ``shapes`` (element widths, shapes, bytes), ``instructions``
(one instruction line, its attributes and metadata), ``frames`` (source
locations and the stack-frame index), ``module`` (a whole module: its
computations, users and callers) and ``text`` (bracket scanning, the error).

Example:
    >>> line = ("  %dot.1 = f32[8,16]{1,0} dot(f32[8,4]{1,0} %a, f32[4,16]{1,0} %b),"
    ...         " lhs_contracting_dims={1}, rhs_contracting_dims={0},"
    ...         ' metadata={op_name="jit(f)/dot_general" source_line=3}')
    >>> found = instruction(line)
    >>> found.name, found.opcode, found.operands, parse_shape(found.shape)
    ('dot.1', 'dot', ('a', 'b'), ('f32', (8, 16)))
    >>> found.attributes["lhs_contracting_dims"], metadata(line)["op_name"]
    ('{1}', 'jit(f)/dot_general')
    >>> shape_bytes(found.shape), shape_bytes("(f32[8]{0}, s4[16]{0:E(4)})")
    (512, 16)
"""

from nnx_introspect._xla.hlo.frames import SourceLocation as SourceLocation
from nnx_introspect._xla.hlo.frames import entry_root as entry_root
from nnx_introspect._xla.hlo.frames import frame_sections as frame_sections
from nnx_introspect._xla.hlo.frames import source_json as source_json
from nnx_introspect._xla.hlo.frames import source_stack as source_stack
from nnx_introspect._xla.hlo.frames import stack_frames as stack_frames
from nnx_introspect._xla.hlo.instructions import Instruction as Instruction
from nnx_introspect._xla.hlo.instructions import definition as definition
from nnx_introspect._xla.hlo.instructions import instruction as instruction
from nnx_introspect._xla.hlo.instructions import metadata as metadata
from nnx_introspect._xla.hlo.instructions import names_in as names_in
from nnx_introspect._xla.hlo.instructions import operand_shapes as operand_shapes
from nnx_introspect._xla.hlo.module import Module as Module
from nnx_introspect._xla.hlo.module import parse_module as parse_module
from nnx_introspect._xla.hlo.module import parsed_once as parsed_once
from nnx_introspect._xla.hlo.shapes import ELEMENT_BITS as ELEMENT_BITS
from nnx_introspect._xla.hlo.shapes import array_bytes as array_bytes
from nnx_introspect._xla.hlo.shapes import arrays as arrays
from nnx_introspect._xla.hlo.shapes import element_bits as element_bits
from nnx_introspect._xla.hlo.shapes import memory_space as memory_space
from nnx_introspect._xla.hlo.shapes import parse_shape as parse_shape
from nnx_introspect._xla.hlo.shapes import shape_bytes as shape_bytes
from nnx_introspect._xla.hlo.shapes import tuple_elements as tuple_elements
from nnx_introspect._xla.hlo.text import HloTextError as HloTextError

__all__ = [
    "ELEMENT_BITS",
    "HloTextError",
    "Instruction",
    "Module",
    "SourceLocation",
    "array_bytes",
    "arrays",
    "definition",
    "element_bits",
    "entry_root",
    "frame_sections",
    "instruction",
    "memory_space",
    "metadata",
    "names_in",
    "operand_shapes",
    "parse_module",
    "parse_shape",
    "parsed_once",
    "shape_bytes",
    "source_json",
    "source_stack",
    "stack_frames",
    "tuple_elements",
]
