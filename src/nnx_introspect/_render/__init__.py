"""Rendering: every report's table as rich, markdown, JSON or HTML, and the SVG charts.

``table`` holds the one table protocol and its renderers (rich, markdown,
HTML, the report mixin); ``formats`` the one-line texts of batches, partition
specs and errors; ``svg`` the one SVG module (scales, round ticks, axes, grid
lines and the line, bar and scatter marks every chart draws with, and the
max-batch chart); ``ticks`` its scales and round ticks (linear, log, or
clipped near a budget); ``widths`` how wide a terminal table's columns are, so
nothing is cropped; ``mesh_charts`` the mesh page's bar chart and split grid.
Charts take plain numbers, never report objects. Nothing here imports another
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
    "Point",
    "Report",
    "Table",
    "Tone",
    "batch_str",
    "chart_svg",
    "error_line",
    "format_bytes",
    "page_html",
    "short_headers",
    "spec_from_json",
    "spec_json",
    "spec_str",
    "table_html",
    "table_text",
    "to_html",
    "to_markdown",
    "to_rich",
    "verdict_html",
    "whole_percent",
]
