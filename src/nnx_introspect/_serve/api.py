"""The public :func:`serve_memory_report`: a :class:`ServeSpec`, compiled, read."""

from typing import Any

from nnx_introspect._serve.assemble import assemble_serve
from nnx_introspect._serve.child import serve_readings
from nnx_introspect._serve.report import ServeMemoryReport
from nnx_introspect._serve.spec import ServeOptions, ServeSpec
from nnx_introspect._step import (
    as_measure,
    measured_topology,
)
from nnx_introspect._typing import ArgumentError, typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["measure_serve", "serve_memory_report"]


def measure_serve(
    spec: ServeSpec,
    *,
    breakdown: bool = False,
    cache: bool = True,
    runs: int | None = None,
) -> ServeMemoryReport:
    """Build, compile and read both serving programs of ``spec``.

    One stage after another, as a training step's
    (:func:`~nnx_introspect._step.measure.measure_step`): the programs
    compiled where their devices are
    (:func:`~nnx_introspect._serve.child.serve_readings`: every problem of the
    cache's split, sequences over the data-parallel axes and KV heads over
    ``tp``, raised before anything is compiled; a named topology in a child
    process), then the report assembled from XLA's readings
    (:func:`~nnx_introspect._serve.assemble.assemble_serve`). With
    ``breakdown``, each program's buffers at its peak are classified too.
    With ``cache``, a program compiled before is read from the cache of
    compile results. With ``runs``, both programs compile on this process's
    devices and run there (the spec's topology, if any, must be those
    devices, and is named for them).
    """
    start_backends_quietly()
    if runs is not None:
        here = measured_topology(
            spec.num_devices, spec.mesh_axes, spec.topology, runs, "the programs"
        )
        spec = spec.replace(topology=here)
    served = serve_readings(spec, breakdown=breakdown, cache=cache, runs=runs)
    return assemble_serve(spec, served)


@typechecked
def serve_memory_report(
    target: Any,
    mesh: Any,
    /,
    *,
    sequences: Any,
    context: Any,
    prompt: Any = None,
    prefill_sequences: Any = None,
    topology: str | None = None,
    max_device_bytes: Any = None,
    weights: Any = "bfloat16",
    kv_cache: Any = "bfloat16",
    init_cache: Any = None,
    decode: Any = None,
    breakdown: Any = False,
    cache: Any = True,
    measure: Any = None,
    compiler_flags: Any = None,
) -> ServeMemoryReport:
    """Prefill and decode memory per device, compiled for the target without it.

    Compiles the two programs a server runs, each with the KV cache donated:
    **prefill** of ``prompt`` tokens for ``prefill_sequences`` sequences,
    written into a cache of ``sequences`` x ``context`` positions, and
    **decode** of one token for each of ``sequences``, reading the whole
    cache. The served weights are a copy in ``weights`` dtype, sharded as the
    model's annotations say; the cache splits sequences over the data-parallel
    axes and KV heads over ``tp``. Out of memory is a verdict
    (:meth:`ServeMemoryReport.fits`), never an error.

    Args:
        target: An ``nnx.Module``, a factory ``(rngs) -> Module`` or
            ``"package.module:factory"``; built abstractly.
        mesh: The serving mesh: ``"tp=8"``, ``{"data": 2, "tp": 4}``, a ``Mesh``.
        sequences: Sequences decoded at once.
        context: Positions of the KV cache per sequence.
        prompt: Tokens prefilled per sequence; ``context`` by default.
        prefill_sequences: Sequences prefilled at once; all by default.
        topology: A target such as ``"h100-8"`` or ``"v5e-8"``, compiled for
            with no accelerator present; ``None`` compiles for this process's
            devices.
        max_device_bytes: A budget per device (``"70GiB"`` or bytes).
        weights: ``"bfloat16"`` (default), ``"float32"`` or ``None`` (the
            model's own dtype).
        kv_cache: ``"bfloat16"``, ``"float8_e4m3fn"``, ``"int8"``, ``"float32"``.
        init_cache: ``"pkg.mod:fn"`` making the cache as
            ``fn(model, sequences, context, dtype)``; default the model's
            ``init_cache(sequences, context, dtype)``.
        decode: ``"pkg.mod:fn"`` called as
            ``fn(model, tokens, positions, cache) -> (logits, cache)``; default
            ``model(tokens, positions, cache, attention_mask)``.
        breakdown: Also classify every buffer live at each program's peak
            (``report.prefill.breakdown``, ``report.decode.breakdown``): the
            ``weights``, the ``KV cache``, the tokens, the ``logits`` output,
            activations (``temporary``) and collective buffers, by source
            line, as a training step's breakdown.
        cache: Read a program compiled before for the same target, mesh,
            shapes, dtypes and versions from the cache of compile results
            (``~/.cache/nnx-introspect``; ``NNX_INTROSPECT_CACHE=off`` turns
            it off too): the report says "from the cache (compiled on DATE)".
        measure: Run both compiled programs on this process's devices, one
            warm-up and ``measure`` timed runs each (``True``: 5), the cache
            fed back: each program's ``measured`` (a decode step's time per
            token, the prefill's time to the first token, tokens per second,
            the allocator's figures) beside the estimate. The devices must
            be this process's (no ``topology``, or the one they are).
        compiler_flags: XLA or libtpu flags both programs are compiled with,
            as a server runs them: ``{"xla_tpu_enable_async_collective_fusion":
            False}``, ``["--name=value", ...]`` or one string of them as
            ``LIBTPU_INIT_ARGS`` spells them. The flags of ``XLA_FLAGS`` and
            (for a TPU ``topology``) ``LIBTPU_INIT_ARGS`` in the environment
            apply too; the report lists every one
            (``report.decode.compiler_flags``). A flag the compiler does not
            know is an error naming ``compiler_flags``.

    Returns:
        The :class:`ServeMemoryReport`.

    Raises:
        ArgumentError: For a bad value (naming the argument): ``sequences``
            not a positive integer, ``prompt`` longer than ``context``, an
            unknown dtype, a ``tp`` that does not divide the KV heads, a model
            with no cache path, a cache of the wrong layout.

    Example:
        >>> from nnx_introspect import serve_memory_report
        >>> from nnx_introspect.examples import llama_tiny_sharded
        >>> report = serve_memory_report(
        ...     llama_tiny_sharded, "fsdp=2,tp=4", sequences=4, context=64,
        ...     prompt=16, max_device_bytes="1GiB")
        >>> report.kv_bytes_per_token  # 2 x 8 layers x 1 KV head x 64 x 2 B
        2048
        >>> # 2 sequences a device, and the cache's int32 write index
        >>> report.decode.kv_cache_bytes == 2048 * 2 * 64 + 4
        True
        >>> report.fits()
        True
    """
    start_backends_quietly()  # before the model is built: no plugin lines
    options = ServeOptions(weights, kv_cache, init_cache, decode)
    spec = ServeSpec(
        target,
        mesh,
        sequences,
        context,
        prompt,
        prefill_sequences,
        topology,
        max_device_bytes,
        options,
        compiler_flags,
    )
    for name, value in (("breakdown", breakdown), ("cache", cache)):
        if not isinstance(value, bool):
            raise ArgumentError(name, f"`{name}` must be True or False, got {value!r}.")
    return measure_serve(
        spec, breakdown=breakdown, cache=cache, runs=as_measure(measure)
    )
