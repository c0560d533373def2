"""Time per token and to the first token: an estimate from the compiled programs.

:func:`serve_time` puts each serving program on the named topology's roofline
(:func:`~nnx_introspect._roofline.program.program_roofline`): its FLOPs
against the peak of its matmul dtype, XLA's bytes accessed against the HBM
bandwidth, its collectives (the tensor-parallel all-reduces of every layer)
against the links of the mesh axes they cross. A decode step gives one token
to each of ``sequences``: its time is the time per token, and ``sequences``
over it the tokens per second. A prefill of the prompt is the time to the
first token. An estimate from data-sheet peaks, never a measurement: the
range runs from every term overlapped (the largest) to none (their sum).

Beside a decode step's estimate stands its floor: the weights and the KV
cache of a device read once, the least any decode step moves. XLA's bytes
accessed are the program's own traffic (an in-place update of the donated
cache counts the tiles it writes, not the whole cache); when they exceed the
floor by more than :data:`EXTRA`, :meth:`ServeTime.extra` names the
instructions that move the most, by the model's source line. On a v5e chip
the measured decode step stood within the estimate's range or 25% of it,
where the floor alone was 2-7x too fast (``benchmarks/README.md``).
"""

import dataclasses
import math
from typing import Any

from nnx_introspect._accelerators import NETWORK_OVERRIDE
from nnx_introspect._render import format_bytes
from nnx_introspect._roofline import (
    LABEL,
    POINT_LABEL,
    RANGE_WORDS,
    Roofline,
    program_roofline,
)
from nnx_introspect._step import duration

__all__ = ["EXTRA", "ServeTime", "duration", "serve_time"]

_EXTRA_ROWS = 5
"""How many source lines :attr:`ServeTime.extra` names."""

EXTRA = 1.5
"""A decode step whose bytes accessed exceed its floor this many times over has
its extra traffic named, instruction by instruction."""


_NOT_SHOWN = (LABEL, "Hardware FLOPs utilisation", "MFU", "Memory time is")
"""Roofline sentences a serving estimate does not show: it gives no MFU, and
it says what its memory terms count itself."""


@dataclasses.dataclass(frozen=True)
class ServeTime:
    """Time per token, tokens per second and time to the first token (estimates).

    Attributes:
        decode: The decode step's roofline (one token for each sequence).
        prefill: The prefill's roofline (``prompt`` tokens of
            ``prefill_sequences`` sequences).
        sequences: Sequences decoded at once.
        replicas: Copies of the model (the product of the data-parallel axes).
        read_bytes: Weights and KV cache of one device: the least a decode
            step reads (its floor; the estimate's memory term is XLA's bytes
            accessed).
        traffic: The decode program's bytes by instruction
            (:func:`~nnx_introspect._xla.hlo.traffic.traffic_json`), or
            ``None``.

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
        >>> time.over_floor  # XLA's bytes accessed over the weights and cache
        1.0
    """

    decode: Roofline
    prefill: Roofline
    sequences: int
    replicas: int
    read_bytes: int
    traffic: dict[str, Any] | None = None

    @property
    def seconds_per_token(self) -> tuple[float, float]:
        """One decode step, ``(low, high)``: every term overlapped, none."""
        return self.decode.low_seconds, self.decode.high_seconds

    @property
    def time_to_first_token(self) -> tuple[float, float]:
        """One prefill of the prompt, ``(low, high)``."""
        return self.prefill.low_seconds, self.prefill.high_seconds

    @property
    def seconds_per_token_estimate(self) -> float:
        """One decode step: the point estimate (the range's low end where none)."""
        return self.decode.planned_seconds

    @property
    def time_to_first_token_estimate(self) -> float:
        """One prefill of the prompt: the point estimate (else the range's low end)."""
        return self.prefill.planned_seconds

    @property
    def tokens_per_second_estimate(self) -> float:
        """Tokens a second of the whole mesh at the decode step's point estimate."""
        return self.sequences / self.seconds_per_token_estimate

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
    def over_floor(self) -> float:
        """The decode step's bytes accessed over its floor (weights and cache)."""
        return self.decode.bytes_accessed / self.read_bytes if self.read_bytes else 1.0

    @property
    def extra(self) -> tuple[str, ...]:
        """Where a decode step moves its bytes, when more than :data:`EXTRA` floors.

        The five source lines whose instructions move the most bytes, each with
        its bytes, the operation (XLA's name), the output's shape and how
        many instructions; empty when the step is within :data:`EXTRA` of
        its floor or its program could not be read.
        """
        if self.over_floor <= EXTRA or self.traffic is None:
            return ()
        out = []
        for group in self.traffic.get("by_source", [])[:_EXTRA_ROWS]:
            source = group.get("source")
            where = (
                ""
                if source is None
                else f" at {source['file'].rsplit('/', 1)[-1]}:{source['line']}"
                + (f" ({source['function']})" if source.get("function") else "")
            )
            count = group["instructions"]
            shape = _first_array(group["shape"])
            times = f" x{count}" if count > 1 else ""
            out.append(
                f"{format_bytes(group['bytes'])}: {group['op']} {shape}{times}{where}"
            )
        return tuple(out)

    @property
    def basis(self) -> tuple[str, ...]:
        """What the estimate assumes, one sentence each, the figures named."""
        d = self.decode
        point: tuple[str, ...] = ()
        if d.time is not None and self.prefill.time is not None:
            point = (
                "The estimate to plan on sums each program's instructions at the "
                f"device's rates: the prefill {duration(self.prefill.time.seconds)}, "
                f"a decode step {duration(d.time.seconds)} ({d.time.basis}); the "
                f"ranges beside them are the roofline's: {RANGE_WORDS}.",
            )
        return (
            *point,
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
            f"Memory time of each program: XLA's bytes accessed at the HBM "
            f"bandwidth (a decode step's {d.bytes_accessed:,.0f} B: "
            f"{duration(d.memory_seconds)}). The floor of a decode step, the "
            f"weights and the KV cache of a device read once "
            f"({self.read_bytes:,} B), takes {duration(self.read_floor_seconds)}: "
            f"the step moves {self.over_floor:.2f}x its floor.",
            *(
                ()
                if not self.extra
                else (
                    f"Over {EXTRA}x its floor: the decode step's instructions that "
                    "move the most bytes (operands read and outputs written): "
                    + "; ".join(self.extra)
                    + ".",
                )
            ),
            *(
                # serving takes no network rate: no word on how to override it
                a.replace(f" {NETWORK_OVERRIDE}", "")
                for a in d.assumptions
                if not a.startswith(_NOT_SHOWN)
            ),
        )

    @property
    def label(self) -> str:
        """What the estimate is: its point estimate's basis, else the roofline's.

        A point estimate names its calibration (or its lack of one); only a
        range alone is the roofline from the cost analysis and data-sheet peaks.
        """
        time = self.decode.time
        return LABEL if time is None else f"{POINT_LABEL} ({time.basis})"

    def json_data(self) -> dict[str, Any]:
        """The estimate's figures as JSON data."""
        return {
            "label": self.label,
            "seconds_per_token_estimate": self.seconds_per_token_estimate,
            "time_to_first_token_estimate": self.time_to_first_token_estimate,
            "tokens_per_second_estimate": self.tokens_per_second_estimate,
            "error": self.decode.error,
            "basis_words": None if self.decode.time is None else self.decode.time.basis,
            "seconds_per_token": list(self.seconds_per_token),
            "time_to_first_token": list(self.time_to_first_token),
            "tokens_per_second": list(self.tokens_per_second),
            "tokens_per_second_per_device": list(self.tokens_per_second_per_device),
            "tokens_per_second_per_replica": list(self.tokens_per_second_per_replica),
            "read_bytes": self.read_bytes,
            "bytes_accessed": self.decode.bytes_accessed,
            "read_floor_seconds": self.read_floor_seconds,
            "over_floor": self.over_floor,
            "extra": list(self.extra),
            "decode": self.decode.json_data(),
            "prefill": self.prefill.json_data(),
        }


def _first_array(shape: str) -> str:
    """The first array of a shape, without its layout.

    Example:
        >>> _first_array("(bf16[2,3]{1,0}, f32[])"), _first_array("s32[]")
        ('bf16[2,3]', 's32[]')
    """
    text = shape.lstrip("(")
    return text[: text.index("]") + 1] if "]" in text else text


def _roofline(
    topology: str,
    program: Any,
    mesh_axes: tuple[tuple[str, int], ...],
    tokens: int,
) -> Roofline | None:
    wire = program.wire_bytes
    flops, accessed = program.flops, program.bytes_accessed
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
        work=program.work,
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
    step = _roofline(topology, decode, mesh_axes, decode.sequences)
    if first is None or step is None:
        return None
    return ServeTime(step, first, decode.sequences, replicas, read, decode.traffic)
