"""The mesh page's HTML charts: bytes per device as bars, a leaf's split as a grid.

Inline CSS, no scripts: the page stays one self-contained file.
"""

import html
import itertools
import math

from nnx_introspect._render import svg
from nnx_introspect._render.table import format_bytes

__all__ = ["GRID_LEGEND_HTML", "bar_chart_html", "split_grid_html"]


def bar_chart_html(
    title: str,
    bars: list[tuple[str, int, float]],
    *,
    budget: int | None = None,
) -> str:
    """Horizontal bars of actual against ideal bytes, as inline SVG.

    Each row is a label, its actual bytes (blue) over its ideal share (grey)
    on a bytes axis with round ticks, and the figures right of the plot; the
    budget, if any, is a dashed red line, past a break in the axis when it
    is far above every bar (the legend says so).

    Args:
        title: The chart's heading.
        bars: ``(label, actual bytes, ideal bytes)`` per bar.
        budget: Optional byte budget drawn as a red line.

    Returns:
        An HTML fragment: the heading, the SVG and its legend.

    Example:
        >>> page = bar_chart_html("Bytes", [("total", 4096, 2048.0)], budget=8192)
        >>> page.count('class="bar actual"'), "budget 8 KiB" in page
        (1, True)
    """
    esc = html.escape
    rows = [
        svg.BarRow(
            label,
            (
                svg.Bar(
                    actual,
                    svg.BLUE,
                    f"{label}: {format_bytes(actual)} per device",
                    "bar actual",
                    14 / 22,
                ),
                svg.Bar(
                    ideal,
                    svg.GREY,
                    f"{label}: ideal {format_bytes(ideal)}",
                    "bar ideal",
                    8 / 22,
                ),
            ),
            value=f"{format_bytes(actual)} (ideal {format_bytes(ideal)})",
        )
        for label, actual, ideal in bars
    ]
    top = max([1.0, *(max(actual, ideal) for _, actual, ideal in bars)])
    ticks, cut = svg.budget_axis(top, budget)
    frame, body = svg.bar_rows(
        rows, budget=budget, value_width=190, axis=ticks, cut=cut
    )
    legend = (
        '<div class="legend"><span class="swatch actual"></span>bytes per device '
        '<span class="swatch ideal"></span>ideal share (global / devices)'
    )
    if budget is not None:
        legend += (
            f' <span class="swatch budget-sw"></span>budget {esc(format_bytes(budget))}'
        )
        if cut is not None:
            words = svg.break_words(cut, budget, peak=top, name="the largest bar")
            legend += "<br>" + esc(words.strip())
    return svg.figure(
        frame,
        title,
        body,
        before=f"<figcaption>{esc(title)}</figcaption>",
        after=legend + "</div>",
        xmlns=False,  # the mesh page names no address
    )


GRID_LEGEND_HTML = (
    '<p class="legend">Each grid is the device mesh: one cell per device, the '
    "first mesh axis down, the others across (the headers give each device's "
    "index along every axis). A cell shows the slice of the array that device "
    "holds, in NumPy notation per dimension (<code>0:2048</code> = elements 0 to "
    "2047; <code>:</code> = the whole dimension). Devices of the same colour hold "
    "the same block: replicas.</p>"
)
"""The legend shown above the split grids of :func:`split_grid_html`."""


def _block_index(
    coords: dict[str, int], axes: tuple[str, ...], sizes: dict[str, int]
) -> int:
    index = 0
    for axis in axes:  # the first axis of a tuple entry is the major one
        index = index * sizes[axis] + coords[axis]
    return index


def _slice_label(
    blocks: list[int], pieces: list[int], shard_shape: tuple[int, ...]
) -> str:
    """The slice a device holds: ``"0:2048, :"`` (``:`` = the whole dimension)."""
    if not shard_shape:
        return "all"
    return ", ".join(
        ":" if p == 1 else f"{b * s}:{(b + 1) * s}"
        for b, p, s in zip(blocks, pieces, shard_shape, strict=True)
    )


def split_grid_html(
    *,
    title: str,
    shape: tuple[int, ...],
    spec: tuple[tuple[str, ...], ...],
    axis_names: tuple[str, ...],
    axis_sizes: tuple[int, ...],
    shard_shape: tuple[int, ...] | None,
    open_: bool = False,
    max_devices: int = 256,
) -> str:
    """How one array of any rank splits over the mesh, as a collapsible block.

    A per-dimension table (size, mesh axes, pieces, shard size) and, for meshes
    up to ``max_devices``, the device grid (first mesh axis down, the others
    across, each header giving the device's index along the axes). Each cell
    says which slice of the array its device holds (``0:2048, :``) and is
    coloured by that block: devices sharing a colour hold replicas. The tooltip
    repeats the device's coordinates and its block index per dimension.

    Returns:
        An HTML fragment (a ``<details>`` element).
    """
    esc = html.escape
    sizes = dict(zip(axis_names, axis_sizes, strict=True))
    dims = [spec[d] if d < len(spec) else () for d in range(len(shape))]
    pieces = [math.prod(sizes.get(a, 1) for a in axes) for axes in dims]
    parts = [
        f'<details class="leaf"{" open" if open_ else ""}>',
        f"<summary>{esc(title)}</summary>",
        '<table class="dims"><thead><tr><th>dim</th><th>size</th><th>split over</th>'
        "<th>pieces</th><th>shard size</th></tr></thead><tbody>",
    ]
    for d, size in enumerate(shape):
        shard = "-" if shard_shape is None else str(shard_shape[d])
        parts.append(
            f"<tr><td>{d}</td><td>{size}</td><td>{esc(' x '.join(dims[d]) or '-')}</td>"
            f"<td>{pieces[d]}</td><td>{shard}</td></tr>"
        )
    parts.append("</tbody></table>")
    n_devices = math.prod(axis_sizes)
    if shard_shape is None:
        parts.append(
            '<p class="warn">This spec cannot be applied: see the problems.</p>'
        )
    elif n_devices > max_devices:
        parts.append(
            f"<p>Device grid omitted: {n_devices} devices (more than {max_devices})."
            "</p>"
        )
    else:
        parts.append(
            _device_grid_html(dims, pieces, axis_names, axis_sizes, shard_shape)
        )
    parts.append("</details>")
    return "".join(parts)


def _device_grid_html(
    dims: list[tuple[str, ...]],
    pieces: list[int],
    axis_names: tuple[str, ...],
    axis_sizes: tuple[int, ...],
    shard_shape: tuple[int, ...],
) -> str:
    """The device grid of :func:`split_grid_html`: one cell per device.

    The first mesh axis down, the others across; each cell the slice its
    device holds, coloured by block (:func:`_block_colour`).
    """
    esc = html.escape
    sizes = dict(zip(axis_names, axis_sizes, strict=True))
    rest_names = axis_names[1:]
    columns = [
        dict(zip(rest_names, index, strict=True))
        for index in itertools.product(*(range(s) for s in axis_sizes[1:]))
    ]
    header = esc(" x ".join(rest_names)) if rest_names else ""
    parts = [
        f'<table class="grid"><caption>rows: {esc(axis_names[0])}'
        f"{'; columns: ' + header if header else ''}</caption>"
    ]
    if rest_names:
        parts.append(
            "<tr><th></th>"
            + "".join(
                "<th>" + esc(", ".join(f"{k}={v}" for k, v in col.items())) + "</th>"
                for col in columns
            )
            + "</tr>"
        )
    for r in range(axis_sizes[0]):
        parts.append(f"<tr><th>{esc(axis_names[0])}={r}</th>")
        for col in columns:
            coords = {axis_names[0]: r, **col}
            blocks = [_block_index(coords, axes, sizes) for axes in dims]
            where = ", ".join(f"{k}={coords[k]}" for k in axis_names)
            label = _slice_label(blocks, pieces, shard_shape)
            parts.append(
                f'<td style="background:{_block_colour(blocks, pieces)}" '
                f'title="device ({esc(where)}) holds block {tuple(blocks)}: '
                f'[{esc(label)}]">{esc(label)}</td>'
            )
        parts.append("</tr>")
    parts.append("</table>")
    return "".join(parts)


def _block_colour(blocks: list[int], pieces: list[int]) -> str:
    """A block's colour: its index over all blocks, as a category's colour."""
    block_id = 0
    for b, p in zip(blocks, pieces, strict=True):
        block_id = block_id * p + b
    return svg.category_colour(block_id)
