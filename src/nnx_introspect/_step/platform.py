"""The target's devices, as the model sees them while its step is traced.

Model code asks JAX where it runs: tunix, for one, applies its activation
sharding constraints only when ``jax.devices()[0].platform != "cpu"``. A step
compiled for a named GPU or TPU target is traced in a child process whose JAX
runs on the CPU, so without help such a model would be traced as CPU code and
compiled without the constraints it has on the real machine.
:func:`devices_seen_as` makes JAX's public device lookups (``jax.devices``,
``jax.local_devices``, ``jax.device_count``, ``jax.local_device_count`` and
``jax.default_backend``) answer with the target's compile-only devices for the
duration of the trace. It is used only inside the child process of a named
topology, only while tracing, and ``step_memory_report(...,
trace_as_target=False)`` turns it off.

It replaces the functions on the ``jax`` module, so code that looks them up
there at call time (``jax.devices()``) sees the target; code that bound them at
import time (``from jax import devices``) does not, and a lookup for an
explicit backend (``jax.devices("cpu")``) still gets that backend.
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

_NAMES = (
    "devices",
    "local_devices",
    "device_count",
    "local_device_count",
    "default_backend",
)


def _answers(devices: Sequence[Any]) -> dict[str, Callable[..., Any]]:
    """Replacements for the lookups in :data:`_NAMES`, over ``devices``."""
    platform = str(devices[0].platform)
    real = {name: getattr(jax, name) for name in _NAMES}

    def asks_another(backend: Any) -> bool:
        return backend is not None and str(backend) != platform

    def devices_(backend: Any = None) -> list[Any]:
        return real["devices"](backend) if asks_another(backend) else list(devices)

    def local_devices(
        process_index: Any = None, backend: Any = None, host_id: Any = None
    ) -> list[Any]:
        if asks_another(backend):
            return list(real["local_devices"](process_index, backend, host_id))
        return list(devices)

    def device_count(backend: Any = None) -> int:
        return (
            int(real["device_count"](backend))
            if asks_another(backend)
            else len(devices)
        )

    def local_device_count(backend: Any = None) -> int:
        if asks_another(backend):
            return int(real["local_device_count"](backend))
        return len(devices)

    def default_backend() -> str:
        return platform

    return {
        "devices": devices_,
        "local_devices": local_devices,
        "device_count": device_count,
        "local_device_count": local_device_count,
        "default_backend": default_backend,
    }


@contextlib.contextmanager
def devices_seen_as(devices: Sequence[Any] | None) -> Iterator[str]:
    """JAX's device lookups answer with ``devices`` in the block.

    Yields the platform the traced code sees (``"gpu"``, ``"tpu"``, or the
    process's own with ``devices=None``, when nothing is replaced). The
    original functions are put back when the block ends, also on an error.

    Example:
        >>> import jax
        >>> class FakeDevice:
        ...     platform = "gpu"
        >>> with devices_seen_as([FakeDevice()] * 8) as seen:
        ...     seen, jax.devices()[0].platform, jax.device_count()
        ('gpu', 'gpu', 8)
        >>> jax.devices()[0].platform, jax.default_backend()
        ('cpu', 'cpu')
    """
    if devices is None:
        yield jax.default_backend()
        return
    if not devices:
        raise ValueError("`devices` must hold at least one device.")
    saved = {name: getattr(jax, name) for name in _NAMES}
    try:
        for name, function in _answers(devices).items():
            setattr(jax, name, function)
        yield str(devices[0].platform)
    finally:
        for name, function in saved.items():
            setattr(jax, name, function)
