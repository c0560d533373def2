"""One program's memory from XLA's readings: the step's and serving's one helper.

Held against hand arithmetic: the held sum of arguments, outputs and
temporaries less the aliased bytes, the plan's arguments for a program the
compiler refused, and who judges a peak over the device's memory.
"""

import pytest

from nnx_introspect._accelerators import Budget
from nnx_introspect._step import memory_from_readings
from nnx_introspect._xla import XlaReadings

GIB = 2**30
DEVICE = Budget(12 * GIB, "the chip's HBM", device_memory_bytes=16 * GIB)


def _readings(backend: str, temp: int) -> XlaReadings:
    return XlaReadings(
        backend,
        "kind",
        1.0,
        argument_bytes=4 * GIB,
        output_bytes=4 * GIB,
        temp_bytes=temp,
        alias_bytes=4 * GIB,
    )


def test_the_peak_is_the_held_sum_less_the_aliased() -> None:
    memory = memory_from_readings(_readings("gpu", 2 * GIB), DEVICE, 0)
    assert memory.peak_bytes == 4 * GIB + 4 * GIB + 2 * GIB - 4 * GIB
    assert not memory.out_of_memory


@pytest.mark.parametrize(
    ("backend", "trust_tpu", "refused"),
    [
        ("gpu", True, True),  # XLA:GPU compiles what cannot run
        ("gpu", False, True),
        ("tpu", True, False),  # XLA:TPU refuses over its HBM itself: trusted
        ("tpu", False, True),  # serving: over the device is out of memory
    ],
)
def test_a_peak_over_the_device_is_out_of_memory_unless_tpu_is_trusted(
    backend: str, trust_tpu: bool, refused: bool
) -> None:
    over = _readings(backend, 13 * GIB)  # 4 + 13 = 17 GiB held, over 16
    memory = memory_from_readings(over, DEVICE, 0, trust_tpu=trust_tpu)
    assert memory.out_of_memory is refused


def test_a_refused_program_counts_the_planned_arguments() -> None:
    refused = XlaReadings(
        "tpu",
        "kind",
        1.0,
        out_of_memory=True,
        compiler_required_bytes=20 * GIB,
    )
    memory = memory_from_readings(refused, DEVICE, 3 * GIB)
    assert memory.argument_bytes == 3 * GIB
    assert memory.temp_bytes == 20 * GIB - 3 * GIB
    assert memory.out_of_memory
