"""XLA's side of the step: compile a lowered step, read its memory and cost analyses.

A compile the compiler refuses for memory (XLA:TPU's ``CompileTimeHbmOom``) is an
answer, not an error: :func:`compile_lowered` returns the compiler's own words and
figures with ``out_of_memory`` set. The message formats read here are pinned by
tests, so a libtpu or jaxlib that words them differently fails loudly.
"""

import re
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax.sharding import Mesh

from nnx_introspect._xla.costs import Costs, matmul_dtype, program_costs
from nnx_introspect._xla.dump import dump_options
from nnx_introspect._xla.flags import compile_options, flag_refusal, flags_used
from nnx_introspect._xla.hlo import (
    HloTextError,
    parse_module,
    parsed_once,
)
from nnx_introspect._xla.hlo.traffic import program_traffic, traffic_json
from nnx_introspect._xla.hlo.work import (
    SCATTER_ROW_BYTES,
    program_work,
)
from nnx_introspect._xla.loop_costs import left_out
from nnx_introspect._xla.native_log import native_stderr_captured
from nnx_introspect._xla.readings import RematStatement, XlaReadings
from nnx_introspect._xla.run import run_compiled
from nnx_introspect._xla.text_hook import program_text_read
from nnx_introspect._xla.toolchain import (
    cuda_plugin_version,
    jaxlib_version,
    libtpu_version,
)

__all__ = [
    "compile_lowered",
    "compiler_name",
]

# LLVM's optimisation of the generated machine code dominates large XLA:CPU
# compiles (a 2,048-device Llama step spends minutes in LLVM loop analysis) and
# changes nothing the report reads: buffer assignment (memory_analysis) and
# cost_analysis are computed on the optimised HLO, before LLVM runs.
_CPU_COMPILER_OPTIONS: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}

GPU_AUTOTUNE_WARNING = (
    "XLA:GPU compiled without a GPU, so without autotuning: every matmul took "
    "XLA's default Triton tiling. A real GPU's choices (other tilings, cuBLAS) "
    "can move temporaries by about 7-13% either way."
)

# The out-of-memory messages of the compilers, as libtpu 0.0.52 prints them
# (and the older "Used X of Y hbm" form). "G" is GiB: v5e's 16 GiB of HBM is
# "15.75G" available after the runtime's reservation.
_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "CompileTimeHbmOom", "Ran out of memory")
_OOM_REQUIRED_AVAILABLE = re.compile(
    r"required for (?P<what>[A-Za-z ]+?) \((?P<required>[0-9.]+[KMGT]?)\) exceeds "
    r"available (?P<space>\w+) \((?P<available>[0-9.]+[KMGT]?)\)"
)
_OOM_USED_OF = re.compile(
    r"Used (?P<required>[0-9.]+[KMGT]?) of (?P<available>[0-9.]+[KMGT]?) (?P<space>\w+)"
)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

REMAT_LINE_RE = re.compile(
    r"Can't reduce memory use below (?P<limit>[0-9.]+\s*[KMGT]?i?B) "
    r"\((?P<limit_bytes>\d+) bytes\) by rematerialization"
    r"(?:; only reduced to (?P<reduced>[0-9.]+\s*[KMGT]?i?B) "
    r"\((?P<reduced_bytes>\d+) bytes\), down from (?P<original>[0-9.]+\s*[KMGT]?i?B) "
    r"\((?P<original_bytes>\d+) bytes\) originally)?[^\n]*"
)
"""XLA's ``HloRematerialization`` warning: it could not bring the step's memory
under the limit it rematerialises towards (``xla/service/hlo_rematerialization.cc``).
"""


def remat_statements(log: str) -> list[RematStatement]:
    r"""Each rematerialization warning in a compiler log, quoted and read.

    ``limit`` is the memory XLA tried to bring the program under (XLA:GPU's
    scheduler limit), ``reduced_to`` what it reached and ``original`` what
    the program needed before; ``quote`` is XLA's line, whole.

    Example:
        >>> log = (
        ...     "W0101 hlo_rematerialization.cc:3170] Can't reduce memory use below "
        ...     "60.13GiB (64567591812 bytes) by rematerialization; only reduced to "
        ...     "77.27GiB (82970500376 bytes), down from 77.27GiB (82970500376 bytes) "
        ...     "originally\n"
        ... )
        >>> (s,) = remat_statements(log)
        >>> s.limit, s.reduced_to, s.original
        (64567591812, 82970500376, 82970500376)
        >>> s.quote.startswith("Can't reduce memory use below 60.13GiB")
        True
    """
    out: list[RematStatement] = []
    seen: set[str] = set()
    for match in REMAT_LINE_RE.finditer(log):
        quote = match.group(0).strip()
        if quote in seen:
            continue
        seen.add(quote)
        reduced, original = match.group("reduced_bytes", "original_bytes")
        out.append(
            RematStatement(
                quote=quote,
                limit=int(match.group("limit_bytes")),
                reduced_to=None if reduced is None else int(reduced),
                original=None if original is None else int(original),
            )
        )
    return out


def _figure(text: str) -> int:
    """``"62.05G"`` as bytes (the compiler rounds to two decimals)."""
    unit = text[-1] if text[-1] in _UNIT else ""
    number = text[: -1 if unit else None]
    return round(float(number) * _UNIT[unit])


def read_oom(message: str) -> dict[str, Any] | None:
    """The compiler's required and available bytes from an out-of-memory error.

    ``None`` when ``message`` is not one; ``required``/``available`` are
    ``None`` when it is one whose figures this version cannot read.

    Example:
        >>> text = ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of "
        ...     "memory on HBM, the total memory required for HLO temporaries "
        ...     "(79.28G) exceeds available HBM (15.75G). HLO module: jit_train.")
        >>> oom = read_oom(text)
        >>> oom["required"] == round(79.28 * 2**30), oom["what"]
        (True, 'HLO temporaries')
    """
    if not any(marker in message for marker in _OOM_MARKERS):
        return None
    if "memory" not in message.lower() and "hbm" not in message.lower():
        return None
    match = _OOM_REQUIRED_AVAILABLE.search(message) or _OOM_USED_OF.search(message)
    if match is None:
        return {"required": None, "available": None, "what": None}
    groups = match.groupdict()
    return {
        "required": _figure(groups["required"]),
        "available": _figure(groups["available"]),
        "what": groups.get("what") or "the program",
    }


def compile_lowered(
    lowered: Any,
    mesh: Mesh,
    start: float,
    *,
    dump_to: str | None = None,
    runs: int | None = None,
    flags: Sequence[tuple[str, str]] = (),
) -> XlaReadings:
    """Compile ``lowered`` for ``mesh``'s devices; XLA's readings of it.

    ``start`` is the ``time.perf_counter()`` at which lowering began: the
    reported compile time covers lowering and compiling. A compile refused for
    memory returns ``out_of_memory=True``, the compiler's message and figures,
    and ``None`` for the byte counts it could not give. With ``dump_to`` (an
    empty directory), XLA writes what
    :func:`~nnx_introspect._xla.dump.read_peak` reads there. With ``runs``,
    the compiled program is run on ``mesh``'s devices (this process's) once
    to warm up and ``runs`` times timed (:func:`~nnx_introspect._xla.run.run_compiled`):
    the readings' ``measured``. ``flags`` are the user's ``(name, value)``
    compiler flags (:func:`~nnx_introspect._xla.flags.as_compiler_flags`'),
    given to the compile as its options; a flag XLA refuses is an
    :class:`~nnx_introspect._typing.ArgumentError` naming ``compiler_flags``.
    The readings' ``compiler_flags`` list them, with those of ``XLA_FLAGS``
    and (for a TPU) ``LIBTPU_INIT_ARGS``.
    """
    device = mesh.devices.flat[0]
    backend = str(device.platform)
    options: dict[str, Any] | None = (
        dict(_CPU_COMPILER_OPTIONS) if backend == "cpu" else None
    )
    if flags:
        options = (options or {}) | compile_options(flags)
    if dump_to is not None:
        options = (options or {}) | dump_options(dump_to)
    warnings = (GPU_AUTOTUNE_WARNING,) if backend == "gpu" else ()
    with native_stderr_captured() as log:
        try:
            compiled: Any = lowered.compile(compiler_options=options)
        except Exception as error:  # the compiler's JaxRuntimeError
            compiled = error
    said: dict[str, Any] = {
        "backend": backend,
        "device_kind": str(device.device_kind),
        "compiler_log": log[0],
        "remat": tuple(remat_statements(log[0])),
        "compiler_flags": flags_used(flags, backend),
    }
    if isinstance(compiled, Exception):
        refusal = flag_refusal(compiled, backend) if flags else None
        if refusal is not None:
            raise refusal from None
        return _refused(compiled, said, start, warnings)
    seconds = time.perf_counter() - start
    memory = compiled.memory_analysis()
    if memory is None:  # pragma: no cover - every XLA backend we know gives one
        raise RuntimeError("XLA gave no memory analysis for the compiled step.")
    text = _text_or_error(compiled, backend, dump_to)
    if isinstance(text, Exception) and dump_to is None and backend == "tpu":
        # jaxlib cannot print some libtpu programs (on v5p an MoE's scatter
        # goes to the SparseCore as a 4-operand async-update jaxlib 0.10.2's
        # reader refuses): compile again, dumped, and read the compiler's own
        # text (:func:`_program_text`), rather than lose the collectives,
        # traffic and time
        with tempfile.TemporaryDirectory(prefix="nnx-introspect-hlo-") as directory:
            return compile_lowered(
                lowered, mesh, start, dump_to=directory, runs=runs, flags=flags
            )
    costs, figures, traffic, work = _read(compiled, backend, mesh, text)
    if costs.why is not None:
        warnings = (*warnings, left_out(costs.why))
    wire = figures.pop("collective_wire_bytes")
    measured = None
    if runs is not None:
        with native_stderr_captured():
            measured = run_compiled(compiled, runs)
    return XlaReadings(
        **said,
        compile_seconds=seconds,
        argument_bytes=int(memory.argument_size_in_bytes),
        output_bytes=int(memory.output_size_in_bytes),
        temp_bytes=int(memory.temp_size_in_bytes),
        alias_bytes=int(memory.alias_size_in_bytes),
        xla_peak_bytes=_peak(memory),
        flops=costs.flops,
        bytes_accessed=costs.bytes_accessed,
        loop_trips=costs.loops,
        warnings=warnings,
        collective_wire_bytes=None
        if wire is None
        else tuple((tuple(a), int(n), int(w)) for a, n, w in wire),
        traffic=traffic,
        work=work,
        measured=measured,
        **figures,
    )


def _refused(
    refusal: Exception, said: dict[str, Any], start: float, warnings: tuple[str, ...]
) -> XlaReadings:
    """The readings of a compile the compiler refused for memory; else it raises."""
    oom = read_oom(str(refusal))
    if oom is None:
        raise refusal
    return XlaReadings(
        **said,
        compile_seconds=time.perf_counter() - start,
        # XLA:TPU's "HLO temporaries" figure holds the arguments too (a
        # prefill of 1 x 256 tokens into a 16.8 GB cache "requires 15.95G"
        # on a v5e, its temporaries 0.2 GB): the reports take the
        # temporaries as required less arguments
        temp_bytes=None,
        out_of_memory=True,
        compiler_message=" ".join(str(refusal).split()),
        compiler_required_bytes=oom["required"],
        compiler_available_bytes=oom["available"],
        warnings=warnings,
    )


def _read(
    compiled: Any, backend: str, mesh: Mesh, text: str | Exception
) -> tuple[Costs, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """The program's costs, its figures (:func:`_figures`), traffic and work.

    The four read the program's ``text`` (or the error printing it gave):
    they share one parse of it.
    """
    with parsed_once():
        costs = program_costs(
            compiled, backend, text if isinstance(text, str) else None
        )
        found: list[Any] = []
        figures = _figures(text, mesh, found)
        work = _work(text, backend, found[0] if found else None)
        return costs, figures, _traffic(text), work


def _traffic(text: str | Exception) -> dict[str, Any] | None:
    """The program's bytes moved by instruction, as JSON data; ``None`` unparsed."""
    if isinstance(text, Exception):
        return None
    try:
        return traffic_json(program_traffic(parse_module(text)))
    except HloTextError:
        return None


def _work(
    text: str | Exception, backend: str, collectives: Any = None
) -> dict[str, Any] | None:
    """The program's work by instruction, as JSON data; ``None`` unparsed.

    A scatter's least bytes per index (:data:`SCATTER_ROW_BYTES`) is a TPU's
    row: a program of another backend is read without it. Given the
    program's :class:`~nnx_introspect._xla.collectives.Collectives`, its
    asynchronous collectives' windows are read with it
    (:func:`~nnx_introspect._xla.collectives.overlap.windowed_work`).
    """
    from nnx_introspect._xla.collectives.overlap import windowed_work

    if isinstance(text, Exception):
        return None
    try:
        row = SCATTER_ROW_BYTES if backend == "tpu" else 0
        module = parse_module(text)
        if collectives is not None:
            found = windowed_work(module, collectives, scatter_row_bytes=row)
            return found.json_data()
        return program_work(module, scatter_row_bytes=row).json_data()
    except HloTextError:
        return None


def program_figures(
    compiled: Any, mesh: Mesh, *, dump_to: str | None = None
) -> dict[str, Any]:
    """What the compiled program's text says: its collectives and matmul dtype.

    ``collectives`` is the :class:`~nnx_introspect._xla.collectives.Collectives`
    as JSON data and ``collective_wire_bytes`` its ``[axes, bytes, wire bytes]``
    per mesh-axis combination; a program this jaxlib's reader cannot read
    gives ``collectives_error`` instead, never an exception. When jaxlib
    cannot print the program (a libtpu newer than jaxlib's XLA writes
    instructions jaxlib's proto reader refuses) and the compile was dumped to
    ``dump_to``, the text the compiler dumped itself is read instead.
    """
    backend = str(mesh.devices.flat[0].platform)
    return _figures(_text_or_error(compiled, backend, dump_to), mesh)


def _text_or_error(compiled: Any, backend: str, dump_to: str | None) -> str | Exception:
    """:func:`_program_text`, or the error it raised, for :func:`_figures` to word.

    The text read is handed to the environment's hook (``text_hook``; off by
    default).
    """
    try:
        text = _program_text(compiled, backend, dump_to)
    except Exception as error:  # worded by _figures, as when it was read there
        return error
    program_text_read(text, compiled)
    return text


def _figures(
    text: str | Exception, mesh: Mesh, keep: list[Any] | None = None
) -> dict[str, Any]:
    """:func:`program_figures` of the program's text (or the error reading it).

    The :class:`~nnx_introspect._xla.collectives.Collectives` read are
    appended to ``keep``, when given.
    """
    from nnx_introspect._xla.collectives import read_collectives
    from nnx_introspect._xla.dump import DumpFormatError

    out: dict[str, Any] = {"collectives": None, "collective_wire_bytes": None}
    try:
        if isinstance(text, Exception):
            raise text
        axes = tuple((str(a), int(s)) for a, s in mesh.shape.items())
        dcn = mesh_dcn_axes(mesh)
        if dcn:  # several slices: XLA partitioned the program per slice
            axes = tuple((a, s // f) for (a, s), (_, f) in zip(axes, dcn, strict=True))
        platform = str(mesh.devices.flat[0].platform)
        hosts = tuple(int(d.process_index) for d in mesh.devices.flat)
        found = read_collectives(
            text,
            axes,
            dcn_axes=dcn,
            network="ICI" if platform == "tpu" else None,
            hosts=hosts if platform == "gpu" else None,
        )
    except (DumpFormatError, ValueError) as error:
        out["collectives_error"] = " ".join(str(error).split())
        return out
    except Exception as error:  # XLA's own error printing the program
        out["collectives_error"] = (
            f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        )
        return out
    if keep is not None:
        keep.append(found)
    out["matmul_dtype"] = matmul_dtype(text)
    out["collectives"] = found.json_data()
    out["collective_wire_bytes"] = [
        [list(axes), int(total.nbytes), round(total.wire_bytes)]
        for axes, total in found.by_axis().items()
    ]
    return out


def mesh_dcn_axes(mesh: Mesh) -> tuple[tuple[str, int], ...]:
    """Each axis's share of the slices a mesh's devices lie on; ``()`` for one slice.

    An axis's share is how many slices its devices span along it (the other
    axes at their first index), read from the devices' ``slice_index``
    (TPU devices of a multi-slice target have one; others have none).

    Example:
        >>> import jax, numpy as np
        >>> from jax.sharding import Mesh
        >>> mesh_dcn_axes(Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("a", "b")))
        ()
    """
    slices = np.vectorize(lambda d: int(getattr(d, "slice_index", 0) or 0))(
        mesh.devices
    )
    if len(np.unique(slices)) <= 1:
        return ()
    shares = []
    for index, name in enumerate(mesh.axis_names):
        line = np.moveaxis(slices, index, 0).reshape(slices.shape[index], -1)[:, 0]
        shares.append((str(name), len(np.unique(line))))
    return tuple(shares)


def _program_text(compiled: Any, backend: str, dump_to: str | None) -> str:
    """The optimized program's text: jaxlib's printing, else the compile's dump."""
    from nnx_introspect._xla.collectives import (
        CollectiveFormatError,
        compiled_hlo_text,
    )
    from nnx_introspect._xla.dump import DumpFormatError, module_text

    try:
        return compiled_hlo_text(compiled)
    except CollectiveFormatError as error:
        if dump_to is None:
            raise
        printing = error
    try:
        return module_text(dump_to, backend=backend)
    except DumpFormatError:
        raise printing from None


def _peak(memory: Any) -> int | None:
    """``peak_memory_in_bytes`` where this jaxlib gives it (0.4.36 and newer)."""
    peak = getattr(memory, "peak_memory_in_bytes", None)
    return None if peak is None else int(peak)


def compiler_name(backend: str, device_kind: str) -> str:
    if backend == "tpu":
        return f"XLA:TPU (libtpu {libtpu_version()}, {device_kind})"
    jaxlib = jaxlib_version()
    if backend == "gpu":
        plugin = cuda_plugin_version()
        return f"XLA:GPU (jaxlib {jaxlib}, CUDA plugin {plugin}, {device_kind})"
    return f"XLA:{backend.upper()} (jaxlib {jaxlib})"
