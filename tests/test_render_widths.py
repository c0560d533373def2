"""Issue 24: a table takes the console's width, wraps rather than crops, and
never loses a right-aligned cell; titles and notes are not squeezed."""

import io

import pytest
from rich.console import Console

from nnx_introspect._render.table import Table, to_rich
from nnx_introspect._render.widths import cell_parts

WIRE = "fsdp: 49.10 GiB; tp: 2.02 TiB"
# the mesh comparison's columns: long headers, a long collectives cell last
MESHES = Table(
    title="fsdp=8 fits in 60.60 GiB of 80 GiB per device; 2 of 3 meshes compiled",
    columns=(
        "mesh",
        "status",
        "step seconds (est.)",
        "MFU ceiling (est.)",
        "peak per device",
        "peak bytes",
        "of budget",
        "state per device",
        "collectives on the wire per device",
    ),
    rows=(
        (
            "fsdp=8",
            "fits",
            "14.8-29.6",
            "41%",
            "60.60 GiB",
            "65,068,236,800",
            "76%",
            "12.10 GiB",
            WIRE,
        ),
        (
            "fsdp=2,tp=4",
            "does not fit: 1.27 GiB over",
            "0.123-0.245",
            "38%",
            "2.02 TiB",
            "2,221,002,342,400",
            "2,525%",
            "1.10 GiB",
            WIRE + "; fsdp+tp: 1.10 GiB",
        ),
        ("tp=8", "rejected by the planner", "-", "-", "-", "-", "-", "-", "-"),
    ),
    notes=("Estimates are a roofline's: a floor and a ceiling, not a measurement.",),
)
# the step report's table: a long verdict, two figure columns, long notes
VERDICT = (
    "Fits in 60.60 GiB of 75 GiB per device (the GPU allocator's pool): one step"
    " on 8 devices (fsdp=2, tp=4; NVIDIA H100 80GB HBM3), by XLA:GPU"
)
NOTE = (
    "The peak is argument + output + temp - alias, what XLA allocates for the"
    " whole step; XLA's own peak_memory_in_bytes is larger on XLA:TPU."
)
STEP = Table(
    title=VERDICT,
    columns=("", "per device", "bytes"),
    rows=(
        (
            "arguments (parameters, optimizer state, batch)",
            "12.10 GiB",
            "12,992,140,134",
        ),
        ("temporary (XLA's preallocated buffer)", "40 GiB", "42,949,672,960"),
    ),
    totals=(("peak", "60.60 GiB", "65,068,236,800"),),
    notes=(NOTE,),
)


def _render(table: Table, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(to_rich(table))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 150, 200])
def test_the_mesh_table_is_never_cropped(width: int) -> None:
    lines = _render(MESHES, width)
    assert max(len(line.rstrip()) for line in lines) <= width
    text = "\n".join(lines)
    # every right-aligned cell is there: whole, or whole in its "; " parts
    for row in MESHES.rows:
        for cell in row:
            for part in cell_parts(cell):
                assert part in text, (width, part)
    if width >= 150:  # a table, not blocks: at 150 its headers and cells wrap
        assert "┃" in text
        assert any("fsdp=2,tp=4" in line and "2.02 TiB" in line for line in lines)


def test_a_table_wider_than_the_console_wraps_its_headers_first() -> None:
    natural = _render(MESHES, 400)
    assert any(WIRE in line for line in natural)
    lines = _render(MESHES, 200)
    assert any(WIRE in line for line in lines)  # only headers wrapped
    assert max(len(line.rstrip()) for line in lines) <= 200


@pytest.mark.parametrize("width", [80, 150, 200])
def test_the_step_report_uses_the_console_width(width: int) -> None:
    lines = _render(STEP, width)
    assert max(len(line.rstrip()) for line in lines) <= width
    if width >= len(VERDICT):
        assert lines[0].strip() == VERDICT  # one line, not squeezed to the table
    if width >= len(NOTE):
        assert any(line.strip() == NOTE for line in lines)
    for row in (*STEP.rows, *STEP.totals):
        for cell in row:
            assert any(cell in line for line in lines), cell
    assert "┃" in "\n".join(lines)
