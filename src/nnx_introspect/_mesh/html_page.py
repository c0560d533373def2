"""The mesh plan as a self-contained HTML page: verdict first, per-leaf detail last."""

import html

from nnx_introspect._mesh.report import MeshConfigReport, MeshProblem, _mesh_str
from nnx_introspect._mesh.specs import entry_axes, spec_str
from nnx_introspect._render import mesh_charts as _render_charts
from nnx_introspect._render import table as _render
from nnx_introspect._render.table import format_bytes


def report_html(report: MeshConfigReport) -> str:
    """The page of :meth:`MeshConfigReport.to_html`, judged on its own budget."""
    esc = html.escape
    used = report.bytes_per_device
    budget = report.max_device_bytes
    verdict = _render.verdict_html(report.verdict, "ok" if report.ok else "bad")
    lists = _problem_list_html("Problems", "problems", report.errors)
    lists += _problem_list_html("Warnings", "warnings", report.warnings)
    chart = _render_charts.bar_chart_html(
        "Bytes per device by kind",
        [
            (cat, report.bytes_by_category[cat], gb / report.num_devices)
            for cat, gb in report.global_bytes_by_category.items()
            if gb
        ]
        + [("total", used, report.ideal_bytes_per_device)],
        budget=budget,
    )
    full = report.table()
    totals = _render.table_html(
        _render.Table(
            title="Totals per device",
            columns=("kind", "bytes/device", "ideal/device"),
            rows=tuple((row[0], row[-2], row[-1]) for row in full.totals),
        )
    )
    other_notes = tuple(n for n in full.notes if n.startswith(("Rules:", "Wastes")))
    notes = (
        '<ul class="notes">'
        + "".join(f"<li>{esc(n)}</li>" for n in other_notes)
        + "</ul>"
        if other_notes
        else ""
    )
    shown = report.leaves + report.optimizer_leaves
    sharded = [i for i, leaf in enumerate(shown) if any(leaf.spec)][:3]
    grids = "".join(
        _render_charts.split_grid_html(
            title=f"{leaf.path} {leaf.shape} {spec_str(leaf.spec)}",
            shape=leaf.shape,
            spec=tuple(entry_axes(e) for e in leaf.spec),
            axis_names=report.axis_names,
            axis_sizes=report.axis_sizes,
            shard_shape=leaf.shard_shape,
            open_=i in sharded,
        )
        for i, leaf in enumerate(shown)
    )
    head = (
        f"<h1>Mesh plan: {esc(_mesh_str(report))} ({report.num_devices} devices)"
        f"</h1>{verdict}<p>{format_bytes(used)} per device (ideal "
        f"{format_bytes(report.ideal_bytes_per_device)}, replication overhead "
        f"{format_bytes(report.replication_overhead)}); {len(report.errors)} "
        f"problem(s), {len(report.warnings)} warning(s)"
        + ("; leaves that cannot be placed are counted whole" if report.errors else "")
        + ".</p>"
    )
    detail = _render.table_html(
        _render.Table(title="Every leaf", columns=full.columns, rows=full.rows)
    )
    body = (
        head
        + lists
        + chart
        + totals
        + notes
        + "<h2>How each leaf splits</h2>"
        + _render_charts.GRID_LEGEND_HTML
        + grids
        + "<h2>Every leaf</h2>"
        + detail
    )
    return _render.page_html(full.title, body)


_SHOWN_PROBLEMS = 8
"""Problems listed on the HTML page's first screen; the rest fold away."""


def _problem_list_html(
    heading: str, css: str, problems: tuple[MeshProblem, ...]
) -> str:
    """A heading, the first few problems and the rest in a collapsed block."""
    if not problems:
        return ""
    esc = html.escape
    kinds: dict[str, int] = {}
    for p in problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    counts = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    items = [f"<li>{esc(p.message)}</li>" for p in problems]
    out = f'<h2>{heading} ({counts})</h2><ul class="{css}">'
    out += "".join(items[:_SHOWN_PROBLEMS]) + "</ul>"
    if len(items) > _SHOWN_PROBLEMS:
        out += (
            f'<details class="more"><summary>{len(items) - _SHOWN_PROBLEMS} more '
            f'{heading.lower()}</summary><ul class="{css}">'
            + "".join(items[_SHOWN_PROBLEMS:])
            + "</ul></details>"
        )
    return out
