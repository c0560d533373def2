"""The step report's HTML page: what was compiled, and the peak's parts as a bar.

Both are made from the report's facts (any :class:`~nnx_introspect._step.
report_render.RenderedStep`); the bar takes plain numbers and is drawn
through :mod:`nnx_introspect._render.svg`.
"""

import html
from collections.abc import Sequence
from typing import Any

from nnx_introspect._render import (
    PhaseBar,
    format_bytes,
    spec_str,
    svg,
    time_chart_svg,
)
from nnx_introspect._step.report_render import (
    RenderedStep,
    cached_date,
    options_text,
)
from nnx_introspect._text import plural

__all__ = [
    "compiled_html",
    "peak_bar_svg",
    "peak_parts",
    "step_time_svg",
]

_COLOURS = {
    "arguments": "#0969da",
    "outputs (not aliased)": "#57606a",
    "temporaries": "#e16f24",
}


def compiled_html(report: RenderedStep) -> str:
    """What was compiled, as a definition list: model, loss, optimizer, batch, mesh.

    The model by its ``"package.module:factory"`` name when it has one
    (:attr:`~nnx_introspect.StepMemoryReport.target`), with its plan's
    parameters; the options (remat, microbatches) when any was applied.
    """
    plan = report.plan
    batch = "; ".join(
        f"{leaf} split as {spec_str(spec)}"
        for leaf, spec in zip(report.batch, report.batch_specs, strict=True)
    )
    mesh = ", ".join(
        f"{n}={s}" for n, s in zip(plan.axis_names, plan.axis_sizes, strict=True)
    )
    compiled = report.compilation
    size = f"{plan.n_params:,} parameters in {plan.n_state_leaves:,} state leaves"
    name = getattr(report, "target", None)
    facts: tuple[tuple[str, str], ...] = (
        ("step", report.step),
        ("model", size if name is None else f"{name} ({size})"),
        ("loss", report.loss or "none (forward only)"),
        ("optimizer", report.optimizer or "none"),
        ("batch", batch or "none"),
        ("mesh", f"{mesh} ({plural(report.num_devices, 'device')})"),
        (
            "topology",
            report.topology or f"none ({compiled.device_kind}, {report.compiled_in})",
        ),
    )
    if report.remat or report.microbatches > 1 or report.lora is not None:
        options = options_text(report.remat, report.microbatches, report.lora)
        facts += (("options", options),)
    if compiled.compiler_flags:
        listed = ", ".join(
            f"{f.name}={f.value} ({f.source})" for f in compiled.compiler_flags
        )
        facts += (("compiler flags", listed),)
    if compiled.cached is not None:
        when = cached_date(compiled.cached)
        facts += (("compiled", f"from the cache (compiled on {when})"),)
    items = "".join(
        f"<dt>{html.escape(name)}</dt><dd>{html.escape(value)}</dd>"
        for name, value in facts
    )
    return f'<dl class="compiled">{items}</dl>'


def peak_parts(
    argument_bytes: int, output_bytes: int, temp_bytes: int, alias_bytes: int
) -> list[tuple[str, int]]:
    """The peak's parts, which sum to it: aliased bytes come off the outputs.

    Example:
        >>> peak_parts(100, 40, 60, 30)
        [('arguments', 100), ('outputs (not aliased)', 10), ('temporaries', 60)]
    """
    return [
        ("arguments", argument_bytes),
        ("outputs (not aliased)", max(0, output_bytes - alias_bytes)),
        ("temporaries", temp_bytes),
    ]


def peak_bar_svg(parts: Sequence[tuple[str, int]], budget: int | None = None) -> str:
    """The peak per device as one bar of its ``parts``, the budget marked.

    Args:
        parts: ``(name, bytes)`` per part (:func:`peak_parts`).
        budget: The byte budget per device, a dashed line across the bar.

    Returns:
        An SVG figure; empty when the peak is 0.

    Example:
        >>> page = peak_bar_svg(peak_parts(96, 32, 0, 0), 256)
        >>> page.count("<svg"), "arguments: 96 B (75%)" in page
        (1, True)
    """
    peak = sum(nbytes for _, nbytes in parts)
    if peak <= 0:
        return ""
    frame, body, cut = svg.split_bar(
        [(name, nbytes, _COLOURS.get(name, "#afb8c1")) for name, nbytes in parts],
        budget,
    )
    return svg.figure(
        frame,
        "the peak per device",
        body,
        caption=f"The peak per device ({html.escape(format_bytes(peak))}): "
        "arguments, outputs and temporaries, less the aliased bytes"
        + ("" if budget is None else ", against the budget (dashed)")
        + "."
        + (
            ""
            if cut is None or budget is None
            else html.escape(svg.break_words(cut, budget, "parts", peak=peak))
        ),
    )


def step_time_svg(roofline: Any, measured: Any, device: str = "") -> str:
    """The step's time as a figure: the estimate, its error bar, a measured run.

    ``roofline`` is the report's :class:`~nnx_introspect._roofline.Roofline`
    (its point estimate, else its low bound, as the serving page draws a
    program's) or ``None``; ``measured`` its
    :class:`~nnx_introspect._step.measured.Measured` run (its median) or
    ``None``. Drawn by the serving page's time panel
    (:func:`~nnx_introspect._render.time_chart_svg`); empty with neither.

    Example:
        >>> step_time_svg(None, None)
        ''
    """
    seconds = None if roofline is None else roofline.planned_seconds
    error = None if roofline is None else roofline.error
    run = None
    if measured is not None and measured.error is None and measured.seconds:
        run = float(measured.median)
    bar = PhaseBar("step", 0, seconds=seconds, error=error, measured=run)
    return time_chart_svg([bar], device, what="one step")
