"""The compiled program is the evidence: XLA's compile and what it wrote, read.

This package knows no model. ``toolchain`` finds the compilers (libtpu, the
CUDA plugin) and makes a named topology's compile-only devices;
``analysis`` compiles a lowered program (reading out-of-memory and
rematerialisation messages) and turns its memory and cost analyses into plain
figures; ``hlo`` is the one parser of XLA's HLO text (instructions, shapes,
byte sizes, metadata, stack frames); ``flags`` normalises the compiler flags
a user gives and lists those a compile ran with (given, or from ``XLA_FLAGS``
and ``LIBTPU_INIT_ARGS``); ``dump`` reads the dump files of a compile (live
ranges, buffer assignment); ``collectives`` lists the
collectives of a program per mesh axis; ``native_log`` keeps XLA's and absl's
native log lines off the user's stderr; ``text_hook`` hands each compiled
program's text to the function ``NNX_INTROSPECT_PROGRAM_TEXT_HOOK`` names (off
unless set: the time model's calibration keeps the texts so).

What other packages use is imported from this face (``from nnx_introspect._xla
import compile_lowered``), never from its modules. The face is lazy: a name's
module is imported the first time the name is asked for, so importing
``native_log`` (the command line does, before it knows whether it needs JAX)
imports no JAX.
"""

import typing

from nnx_introspect._lazy import lazy_getattr, lazy_names

if typing.TYPE_CHECKING:  # the explicit re-exports, for type checkers and IDEs
    from nnx_introspect._xla.analysis import compile_lowered as compile_lowered
    from nnx_introspect._xla.analysis import compiler_name as compiler_name
    from nnx_introspect._xla.cache import answer_key as answer_key
    from nnx_introspect._xla.cache import cache_enabled as cache_enabled
    from nnx_introspect._xla.cache import compile_key as compile_key
    from nnx_introspect._xla.cache import load_answer as load_answer
    from nnx_introspect._xla.cache import load_result as load_result
    from nnx_introspect._xla.cache import store_answer as store_answer
    from nnx_introspect._xla.cache import store_result as store_result
    from nnx_introspect._xla.cache import without_callers as without_callers
    from nnx_introspect._xla.collectives import DCN_MARK as DCN_MARK
    from nnx_introspect._xla.collectives import Collective as Collective
    from nnx_introspect._xla.collectives import Collectives as Collectives
    from nnx_introspect._xla.dump import DumpFormatError as DumpFormatError
    from nnx_introspect._xla.dump import LiveCurve as LiveCurve
    from nnx_introspect._xla.dump import PeakBuffer as PeakBuffer
    from nnx_introspect._xla.dump import PeakBuffers as PeakBuffers
    from nnx_introspect._xla.dump import SourceLocation as SourceLocation
    from nnx_introspect._xla.dump import read_peak as read_peak
    from nnx_introspect._xla.dump import source_json as source_json
    from nnx_introspect._xla.flags import FLAG_SOURCES as FLAG_SOURCES
    from nnx_introspect._xla.flags import CompilerFlag as CompilerFlag
    from nnx_introspect._xla.flags import CompilerFlagsLike as CompilerFlagsLike
    from nnx_introspect._xla.flags import as_compiler_flags as as_compiler_flags
    from nnx_introspect._xla.flags import compile_options as compile_options
    from nnx_introspect._xla.flags import flags_text as flags_text
    from nnx_introspect._xla.hlo.frames import user_frame as user_frame
    from nnx_introspect._xla.hlo.frames import user_frames as user_frames
    from nnx_introspect._xla.hlo.lineage import COLLECTIVES as COLLECTIVES
    from nnx_introspect._xla.hlo.lineage import REDUCING as REDUCING
    from nnx_introspect._xla.hlo.lineage import Origin as Origin
    from nnx_introspect._xla.hlo.phases import Phases as Phases
    from nnx_introspect._xla.hlo.work import OpWork as OpWork
    from nnx_introspect._xla.hlo.work import Work as Work
    from nnx_introspect._xla.hlo.work import program_work as program_work
    from nnx_introspect._xla.hlo.work import work_from_json as work_from_json
    from nnx_introspect._xla.native_log import NOISE as NOISE
    from nnx_introspect._xla.native_log import drop_noise as drop_noise
    from nnx_introspect._xla.native_log import (
        native_stderr_captured as native_stderr_captured,
    )
    from nnx_introspect._xla.native_log import (
        native_stderr_filtered as native_stderr_filtered,
    )
    from nnx_introspect._xla.native_log import python_log_dropped as python_log_dropped
    from nnx_introspect._xla.native_log import (
        start_backends_quietly as start_backends_quietly,
    )
    from nnx_introspect._xla.readings import RematStatement as RematStatement
    from nnx_introspect._xla.readings import XlaReadings as XlaReadings
    from nnx_introspect._xla.toolchain import check_compiler as check_compiler
    from nnx_introspect._xla.toolchain import libtpu_version as libtpu_version
    from nnx_introspect._xla.toolchain import topology_mesh as topology_mesh

_LAZY = lazy_names(__file__)
__all__ = sorted(_LAZY)

# Hidden from type checkers, which see the imports above.
if not typing.TYPE_CHECKING:
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())
