"""Rendering: every report's table as rich, markdown, JSON or HTML, and the SVG charts.

``table`` holds the one table protocol and its renderers (rich, markdown,
HTML, the report mixin); ``formats`` the one-line texts of batches, partition
specs and errors; ``svg`` the one SVG module (scales, round ticks, axes, grid
lines, the budget and the bars every chart draws with; ``batch_chart`` the
max-batch chart); ``marks`` the marks it draws with and where a label lies;
``ticks`` its scales and round ticks (linear, log, clipped near a budget, or
broken before a far one); ``widths`` how wide a terminal table's columns are,
so nothing is cropped; ``mesh_charts`` the mesh page's bar chart and split
grid; ``phase_chart`` the memory and time of each phase of a step of several
programs (serving, RL), which a report offering ``phase_bars()`` gets on its
page. Charts take plain numbers, never report objects. Nothing here imports another
package of nnx_introspect but ``_typing``.
"""

from nnx_introspect._render.batch_chart import chart_svg as chart_svg
from nnx_introspect._render.formats import batch_str as batch_str
from nnx_introspect._render.formats import error_line as error_line
from nnx_introspect._render.formats import spec_from_json as spec_from_json
from nnx_introspect._render.formats import spec_json as spec_json
from nnx_introspect._render.formats import spec_str as spec_str
from nnx_introspect._render.formats import whole_percent as whole_percent
from nnx_introspect._render.narrow import short_headers as short_headers
from nnx_introspect._render.phase_chart import PhaseBar as PhaseBar
from nnx_introspect._render.phase_chart import PhaseBars as PhaseBars
from nnx_introspect._render.phase_chart import phase_chart_svg as phase_chart_svg
from nnx_introspect._render.phase_chart import time_chart_svg as time_chart_svg
from nnx_introspect._render.svg import Point as Point
from nnx_introspect._render.table import FittedTable as FittedTable
from nnx_introspect._render.table import Report as Report
from nnx_introspect._render.table import Table as Table
from nnx_introspect._render.table import Tone as Tone
from nnx_introspect._render.table import format_bytes as format_bytes
from nnx_introspect._render.table import page_html as page_html
from nnx_introspect._render.table import table_html as table_html
from nnx_introspect._render.table import table_text as table_text
from nnx_introspect._render.table import to_html as to_html
from nnx_introspect._render.table import to_markdown as to_markdown
from nnx_introspect._render.table import to_rich as to_rich
from nnx_introspect._render.table import verdict_html as verdict_html

__all__ = [
    "FittedTable",
    "PhaseBar",
    "PhaseBars",
    "Point",
    "Report",
    "Table",
    "Tone",
    "batch_str",
    "chart_svg",
    "error_line",
    "format_bytes",
    "page_html",
    "phase_chart_svg",
    "short_headers",
    "spec_from_json",
    "spec_json",
    "spec_str",
    "table_html",
    "table_text",
    "time_chart_svg",
    "to_html",
    "to_markdown",
    "to_rich",
    "verdict_html",
    "whole_percent",
]
