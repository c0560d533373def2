"""Time per token and to the first token: an estimate from the compiled programs.

:func:`serve_time` puts each serving program on the named topology's roofline
(:func:`~nnx_introspect._roofline.program.program_roofline`): its FLOPs
against the peak of its matmul dtype, its bytes against the HBM bandwidth (a
decode step's: the weights and the KV cache read once; the prefill's: XLA's
bytes accessed),
its collectives (the tensor-parallel all-reduces of every layer) against the
links of the mesh axes they cross. A decode step gives one token to each of
``sequences``: its time is the time per token, and ``sequences`` over it the
tokens per second. A prefill of the prompt is the time to the first token.
An estimate from data-sheet peaks, never a measurement: the range runs from
every term overlapped (the largest) to none (their sum).
"""

import dataclasses
import math
from typing import Any

from nnx_introspect._roofline.estimate import LABEL, Roofline
from nnx_introspect._roofline.program import program_roofline

__all__ = ["ServeTime", "duration", "serve_time"]


_NOT_SHOWN = (LABEL, "Hardware FLOPs utilisation", "MFU", "Memory time is")
"""Roofline sentences a serving estimate does not show: it gives no MFU, and
it says what its memory terms count itself."""


def duration(seconds: float) -> str:
    """``0.0125`` -> ``"12.5 ms"``: three significant figures.

    Example:
        >>> duration(0.0125), duration(2.0), duration(3e-6)
        ('12.5 ms', '2 s', '3 us')
    """
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


@dataclasses.dataclass(frozen=True)
class ServeTime:
    """Time per token, tokens per second and time to the first token (estimates).

    Attributes:
        decode: The decode step's roofline (one token for each sequence).
        prefill: The prefill's roofline (``prompt`` tokens of
            ``prefill_sequences`` sequences).
        sequences: Sequences decoded at once.
        replicas: Copies of the model (the product of the data-parallel axes).
        read_bytes: Weights and KV cache of one device: what a decode step
            reads from HBM, once each (its memory term).
        xla_bytes_accessed: XLA's bytes accessed of the decode step, shown
            and not used: its cost model counts the in-place update of the
            donated cache as a read and a write of the whole cache.

    Example:
        >>> from nnx_introspect._roofline.program import program_roofline
        >>> step = program_roofline("h100-8", flops=0.0, bytes_accessed=3.35e9,
        ...     wire_bytes_by_axes=(), mesh_axes=(("tp", 8),))
        >>> time = ServeTime(step, step, sequences=64, replicas=1,
        ...                  read_bytes=3_350_000_000)
        >>> time.seconds_per_token  # 3.35 GB at 3.35 TB/s
        (0.001, 0.001)
        >>> time.tokens_per_second_per_device  # 64 tokens a ms on 8 GPUs
        (8000.0, 8000.0)
    """

    decode: Roofline
    prefill: Roofline
    sequences: int
    replicas: int
    read_bytes: int
    xla_bytes_accessed: float | None = None

    @property
    def seconds_per_token(self) -> tuple[float, float]:
        """One decode step, ``(low, high)``: every term overlapped, none."""
        return self.decode.low_seconds, self.decode.high_seconds

    @property
    def time_to_first_token(self) -> tuple[float, float]:
        """One prefill of the prompt, ``(low, high)``."""
        return self.prefill.low_seconds, self.prefill.high_seconds

    @property
    def tokens_per_second(self) -> tuple[float, float]:
        """Tokens a second of the whole mesh, ``(low, high)``."""
        low, high = self.seconds_per_token
        return self.sequences / high, self.sequences / low

    @property
    def tokens_per_second_per_device(self) -> tuple[float, float]:
        """:attr:`tokens_per_second` over the devices."""
        low, high = self.tokens_per_second
        return low / self.decode.devices, high / self.decode.devices

    @property
    def tokens_per_second_per_replica(self) -> tuple[float, float]:
        """:attr:`tokens_per_second` over the replicas."""
        low, high = self.tokens_per_second
        return low / self.replicas, high / self.replicas

    @property
    def read_floor_seconds(self) -> float:
        """:attr:`read_bytes` at the HBM bandwidth: no decode step is faster."""
        return self.read_bytes / self.decode.hbm_bytes_per_second

    @property
    def basis(self) -> tuple[str, ...]:
        """What the estimate assumes, one sentence each, the figures named."""
        d = self.decode
        return (
            f"{LABEL}.",
            f"On {d.topology}, per device: matmul peak "
            f"{d.peak_flops_per_second / 1e12:.4g} TFLOP/s ({d.peak_words}"
            + (
                ""
                if d.peak_flops_per_second == d.bf16_peak_flops_per_second
                else f"; the bf16 dense peak is "
                f"{d.bf16_peak_flops_per_second / 1e12:.4g} TFLOP/s"
            )
            + f"), HBM {d.hbm_bytes_per_second / 1e12:.3g} TB/s.",
            f"Memory time of a decode step: the weights and the KV cache of a "
            f"device read once ({self.read_bytes:,} B) at the HBM bandwidth: "
            f"{duration(self.read_floor_seconds)}."
            + (
                ""
                if self.xla_bytes_accessed is None
                else f" XLA's cost analysis counts {self.xla_bytes_accessed:,.0f} "
                "B (the in-place update of the donated cache as a read and a "
                "write of all of it), not used."
            ),
            "Memory time of the prefill: XLA's bytes accessed at the HBM bandwidth.",
            *(a for a in d.assumptions if not a.startswith(_NOT_SHOWN)),
        )

    def json_data(self) -> dict[str, Any]:
        """The estimate's figures as JSON data."""
        return {
            "label": LABEL,
            "seconds_per_token": list(self.seconds_per_token),
            "time_to_first_token": list(self.time_to_first_token),
            "tokens_per_second": list(self.tokens_per_second),
            "tokens_per_second_per_device": list(self.tokens_per_second_per_device),
            "tokens_per_second_per_replica": list(self.tokens_per_second_per_replica),
            "read_bytes": self.read_bytes,
            "xla_bytes_accessed": self.xla_bytes_accessed,
            "read_floor_seconds": self.read_floor_seconds,
            "decode": self.decode.json_data(),
            "prefill": self.prefill.json_data(),
        }


def _roofline(
    topology: str,
    program: Any,
    mesh_axes: tuple[tuple[str, int], ...],
    tokens: int,
    read: int | None = None,
) -> Roofline | None:
    wire = program.wire_bytes
    flops, accessed = program.flops, program.bytes_accessed
    if read is not None and accessed is not None:
        accessed = read
    if flops is None or accessed is None or wire is None or not math.isfinite(flops):
        return None
    return program_roofline(
        topology,
        flops=flops,
        bytes_accessed=accessed,
        wire_bytes_by_axes=wire,
        mesh_axes=mesh_axes,
        matmul_dtype=program.matmul_dtype,
        tokens=tokens,
    )


def serve_time(
    topology: str | None,
    mesh_axes: tuple[tuple[str, int], ...],
    prefill: Any,
    decode: Any,
    replicas: int,
) -> ServeTime | None:
    """The estimate of two compiled :class:`ServeProgram`, or ``None``.

    ``None`` without a topology (no data sheet to hold the programs to), or
    for a program whose FLOPs, bytes or collectives XLA did not give (one the
    compiler refused; an estimate without them would be too low). A program
    over the budget that XLA compiled still has its estimate.
    """
    if topology is None:
        return None
    first = _roofline(topology, prefill, mesh_axes, prefill.sequences * prefill.tokens)
    read = decode.weights_bytes + decode.kv_cache_bytes
    step = _roofline(topology, decode, mesh_axes, decode.sequences, read)
    if first is None or step is None:
        return None
    return ServeTime(
        step, first, decode.sequences, replicas, read, decode.bytes_accessed
    )
