"""A Pallas kernel that cannot lower for the target, said in one line naming it.

A model may call a Pallas kernel written for one platform: google-tunix's
Qwen3 ``MoELayer`` calls Megablox's grouped matmul (``megablox.gmm``, a Mosaic
TPU kernel) unless the platform it sees is the CPU, where it loops over its
experts densely. Traced as on a GPU target, such a model reaches JAX's
lowering with a TPU kernel, and JAX's own words ("Cannot lower pallas_call on
platform: gpu. To use Pallas on GPU, install jaxlib GPU...") give install
advice that does not apply and name no kernel. :func:`kernel_refusal` turns
that error into one :class:`~nnx_introspect._typing.ArgumentError` naming
``topology``: the kernel (the ``pallas_call``'s ``name``, else its kernel
function and module), the model's line that called it, what it was written
for, and the way out: a target of that platform, or the model's path without
the kernel where the model has one for the CPU (``trace_as_target=False``,
``--trace-as-cpu``: the model traced as on CPU, compiled for the target).

The kernel is read from the error as JAX raises it: the lowering rule's
``params`` (its frame's locals) and the traceback JAX attaches of where the
``pallas_call`` was traced (``__cause__``); the model's line, where that
traceback stops inside the kernel's own package (Megablox's ``gmm``, a
``custom_vjp``), from the source of the equations being lowered. Where those
are not found (another JAX version), the line says "a Pallas kernel" and keeps
JAX's own words.
"""

import os
import re
import types
from typing import Any

from nnx_introspect._typing import ArgumentError

__all__ = ["kernel_refusal"]

_REFUSED = re.compile(
    r"Cannot lower pallas_call on platform: (\w+)"
    r"|(Only interpret mode is supported on CPU backend)"
)
"""JAX's words when a ``pallas_call`` has no lowering for the platform."""

_PLATFORMS = {"gpu": "GPU", "cuda": "GPU", "rocm": "GPU", "tpu": "TPU", "cpu": "CPU"}

_WRITTEN_FOR = (
    ("jax._src.pallas.mosaic_gpu", "GPU (Mosaic GPU)"),
    ("jax._src.pallas.triton", "GPU (Triton)"),
    ("jax._src.pallas.mosaic", "TPU (Mosaic)"),
)
"""A kernel's platform, by the module of its ``compiler_params``' class."""

DENSE_PATH = (
    "a model that picks its kernel by platform (google-tunix's Qwen3 MoELayer "
    "loops over its experts densely where jax.devices()[0].platform == 'cpu') "
    "takes its CPU path when traced as on CPU and compiled for the target: "
    "trace_as_target=False (--trace-as-cpu)"
)
"""The way to a model's path without the kernel, in words."""


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes and contexts, each once, nearest first."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        found = todo.pop(0)
        if found is None or any(found is s for s in seen):
            continue
        seen.append(found)
        todo += [found.__cause__, found.__context__]
    return seen


def _frames(tb: types.TracebackType | None) -> list[types.FrameType]:
    """The frames of a traceback, outermost first."""
    out = []
    while tb is not None:
        out.append(tb.tb_frame)
        tb = tb.tb_next
    return out


def _lowering_params(error: BaseException) -> dict[str, Any]:
    """The ``pallas_call``'s parameters, from its lowering rules' frames.

    The platform's rule takes ``compiler_params`` as an argument of its own,
    the generic rule holds it among the others: both frames are read.
    """
    found: dict[str, Any] = {}
    for frame in reversed(_frames(error.__traceback__)):
        params = frame.f_locals.get("params")
        if isinstance(params, dict) and "jaxpr" in params:
            found = {**params, **found}
        if "compiler_params" in frame.f_locals:
            found.setdefault("compiler_params", frame.f_locals["compiler_params"])
    return found


def _module_of(path: str) -> str:
    """``.../site-packages/jax/experimental/x/y.py`` as ``jax.experimental.x.y``."""
    parts = os.path.normpath(path).removesuffix(".py").split(os.sep)
    for root in ("site-packages", "dist-packages"):
        if root in parts:
            return ".".join(parts[parts.index(root) + 1 :])
    return os.path.basename(path).removesuffix(".py")


def _short(path: str, line: int) -> str:
    """A user's file as its last two parts and the line: ``qwen3/model.py:913``."""
    parts = os.path.normpath(path).split(os.sep)
    return f"{'/'.join(parts[-2:])}:{line}"


def _jax_file(path: str) -> bool:
    parts = os.path.normpath(path).split(os.sep)
    return "jax" in parts or "jaxlib" in parts or "flax" in parts


def _traced_at(error: BaseException) -> list[types.FrameType]:
    """The frames where the ``pallas_call`` was traced, outermost first.

    JAX attaches them to its error as a ``JaxStackTraceBeforeTransformation``
    cause; under a ``custom_vjp`` (Megablox's ``gmm``) they may stop at the
    function that called ``pallas_call``.
    """
    for found in _chain(error):
        if type(found).__name__ == "JaxStackTraceBeforeTransformation":
            return _frames(found.__traceback__)
    return []


def _kernel(params: dict[str, Any], traced: list[types.FrameType]) -> str | None:
    """The kernel: its ``pallas_call`` name, else its function and module.

    The function that called ``pallas_call`` where the traceback reaches it
    (Megablox's ``gmm``, in the kernel's own file), else the kernel body's
    (JAX's debug info: ``kernel at .../megablox/gmm.py:417``).
    """
    name = params.get("name")
    if isinstance(name, str) and name:
        return f"`{name}`"
    info = getattr(params.get("jaxpr"), "debug_info", None)
    where = getattr(info, "func_src_info", None)
    if not isinstance(where, str) or " at " not in where:
        return None
    function, _, location = where.partition(" at ")
    path = location.rsplit(":", 1)[0]
    if traced and traced[-1].f_code.co_filename == path:
        function = traced[-1].f_code.co_name
    return f"`{function}` of {_module_of(path)}"


def _caller(traced: list[types.FrameType]) -> str | None:
    """The model's innermost line outside JAX and Flax that traced the kernel."""
    for frame in reversed(traced):
        if not _jax_file(frame.f_code.co_filename):
            return _short(frame.f_code.co_filename, frame.f_lineno)
    return None


def _lowered_from(error: BaseException) -> str | None:
    """The model's innermost line that traced the equations being lowered.

    Where the traced frames stop at the kernel's own function (a
    ``custom_vjp`` such as Megablox's ``gmm``, traced on its own), the
    equation that holds it keeps where the model called it: JAX's lowering
    frames hold each equation (``eqn``) and its ``source_info`` traceback,
    innermost frame first.
    """
    for frame in reversed(_frames(error.__traceback__)):
        source = getattr(frame.f_locals.get("eqn"), "source_info", None)
        for user in getattr(getattr(source, "traceback", None), "frames", None) or ():
            path, line = getattr(user, "file_name", ""), getattr(user, "line_num", 0)
            user_file = isinstance(path, str) and path[:1] not in ("", "<")
            if user_file and not _jax_file(path) and isinstance(line, int):
                return _short(path, line)
    return None


def _written_for(params: dict[str, Any]) -> str | None:
    module = type(params.get("compiler_params")).__module__
    return next(
        (what for prefix, what in _WRITTEN_FOR if module.startswith(prefix)), None
    )


def kernel_refusal(
    error: BaseException, topology: str | None, seen: str
) -> ArgumentError | None:
    """The one-line error for a Pallas kernel that cannot lower, else ``None``.

    Args:
        error: What lowering the program raised (JAX's ``ValueError``, or an
            error raised from it: its causes and contexts are searched).
        topology: The target compiled for (``"h100-8"``, or its devices'
            kind in parentheses), or ``None`` (this process's devices).
        seen: The platform the model saw while it was traced (``"gpu"``;
            ``"cpu"`` with ``trace_as_target=False``, when the model's CPU
            path is no way out: it was taken).

    Returns:
        An :class:`~nnx_introspect._typing.ArgumentError` naming ``topology``,
        or ``None`` when ``error`` is not a kernel's refusal.

    Example:
        >>> error = ValueError(
        ...     "Cannot lower pallas_call on platform: gpu. To use Pallas on "
        ...     "GPU, install jaxlib GPU."
        ... )
        >>> print(kernel_refusal(error, "h100-8", "gpu"))  # doctest: +ELLIPSIS
        `topology` 'h100-8': the model calls a Pallas kernel, which JAX cannot \
lower for GPU (JAX: "Cannot lower pallas_call on platform: gpu"). Name a \
topology it was written for, or compile the model's path without it: ... \
trace_as_target=False (--trace-as-cpu).
        >>> kernel_refusal(ValueError("another"), "h100-8", "gpu") is None
        True
    """
    refused = next((e for e in _chain(error) if _REFUSED.search(str(e))), None)
    if refused is None:
        return None
    match = _REFUSED.search(str(refused))
    assert match is not None
    platform = _PLATFORMS.get(match[1] or "cpu", match[1] or "CPU")
    params = _lowering_params(refused)
    traced = _traced_at(refused)
    kernel = _kernel(params, traced)
    caller = _caller(traced) or _lowered_from(refused)
    written = _written_for(params)
    what = "a Pallas kernel" if kernel is None else f"the Pallas kernel {kernel}"
    if caller is not None:
        what += f" (at {caller})"
    if written is not None:
        what += f", a {written} kernel JAX cannot lower for {platform}"
    else:
        said = str(refused).split(". ")[0]
        what += f', which JAX cannot lower for {platform} (JAX: "{said}")'
    target = f"`topology` {topology!r}"
    if topology is not None and topology.startswith("("):  # the devices' kind
        target = f"`topology` {topology}"
    home = written.split(" ")[0] if written is not None else None
    fix = f"Name a {home} topology" if home else "Name a topology it was written for"
    if platform == "CPU":
        tail = f"{fix} (--topology): a CPU compile runs no compiled Pallas kernel."
    elif _PLATFORMS.get(seen, seen) == platform:
        tail = f"{fix}, or compile the model's path without it: {DENSE_PATH}."
    else:
        tail = (
            "The model was traced as on CPU (trace_as_target=False) and still "
            f"calls it, so it has no path without the kernel: {fix[0].lower()}"
            f"{fix[1:]}."
        )
    return ArgumentError("topology", f"{target}: the model calls {what}. {tail}")
