"""The answer of a serving search: :class:`ServeSearch`, its verdict, table and chart.

:func:`~nnx_introspect._serve.size_search.max_sequences` and
:func:`~nnx_introspect._serve.size_search.max_context` search; this module holds
what they answer: every value compiled, the largest that fits below the
smallest that does not, the sizes past the edge that fit too, and the
program over the budget one step above the answer with what lifts it.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import Budget
from nnx_introspect._render import Report, Table, format_bytes
from nnx_introspect._serve.frontier import Frontier, frontier_svg, predict_frontier
from nnx_introspect._size_search import (
    Jump,
    SearchPoint,
    SizeSearch,
    answer_words,
    jump_notes,
)

__all__ = ["ServeSearch"]


@dataclasses.dataclass(frozen=True)
class ServeSearch(Report, SizeSearch):
    """The largest ``sequences`` or ``context`` whose serving programs fit.

    Attributes:
        searched: ``"sequences"`` or ``"context"``.
        most: The answer: the largest value compiled below the smallest that
            does not fit, so every value tried up to it fits (0: none does).
            The same name and meaning in every search (``BatchSearch.most``,
            ``RLBatchSearch.most``); ``value`` is its older name.
        step: The granularity: the data-parallel size for sequences, 1 for
            context.
        points: Every value tried, in order: ``(sequences, context,
            peak_bytes, fits)``, the peak the larger of the two programs'
            (``tried`` holds the same compiles as :class:`SearchPoint`
            records, the form every search shares).
        budget: The budget of one device.
        kv_bytes_per_token: The KV cache's bytes of one position of one
            sequence on a device (``None``: not known).
        data_parallel: The replicas the sequences are split over.
        limits: Per point, the program whose peak it is (``"prefill"`` or
            ``"decode"``; ``""`` where not known).
        cached: Per point, whether its programs were read from the cache of
            compile results.
        tried: Every compile as a :class:`SearchPoint`, by value: the program
            whose peak it is, its temporaries, whether it came from the cache,
            whether it was a probe past the edge.
        jumps: Every value tried whose peak is below a smaller value's
            (:class:`Jump`); the first that crosses the budget names the
            instruction at each peak.
        prefills: Per point, ``(prompts prefilled at once, tokens of each)``
            as compiled (the report's defaults where not given); ``()`` where
            not known.
        prefill_given: Whether ``prefill_sequences`` was given (else the
            report's default, every sequence at once).

    Example:
        >>> from nnx_introspect._accelerators.budget import Budget
        >>> points = ((1, 64, 50, True), (16, 64, 80, False),
        ...           (7, 64, 62, True), (8, 64, 64, False))
        >>> found = ServeSearch("sequences", 7, 1, points, Budget(63, None))
        >>> found.compiles, found.verdict
        (4, 'Most sequences that fit: 7, within 63 B per device; 8 does not')
        >>> found.table().rows[-1]
        ('8', '64', '64 B', 'no', '', 'edge')
        >>> found.frontier.product  # sequences x context at the budget: 7.5 x 64
        480.0
        >>> found.value == found.most, found.edge_size, found.also_fits
        (True, 8, ())
    """

    SCHEMA = "nnx-introspect/serve-search"
    SCHEMA_VERSION = 1

    searched: str
    most: int
    step: int
    points: tuple[tuple[int, int, int, bool], ...]
    budget: Budget
    kv_bytes_per_token: int | None = None
    data_parallel: int = 1
    limits: tuple[str, ...] = ()
    cached: tuple[bool, ...] = ()
    tried: tuple[SearchPoint, ...] = ()
    jumps: tuple[Jump, ...] = ()
    prefills: tuple[tuple[int, int], ...] = ()
    prefill_given: bool = True

    def __post_init__(self) -> None:
        """A search built from ``points`` alone gets its ``tried`` from them."""
        if self.tried or not self.points:
            return
        limits = self.limits or ("",) * len(self.points)
        hits = self.cached or (None,) * len(self.points)
        index = 0 if self.searched == "sequences" else 1
        tried = sorted(
            SearchPoint(p[index], p[2], p[3], limit, None, hit)
            for p, limit, hit in zip(self.points, limits, hits, strict=True)
        )
        object.__setattr__(self, "tried", tuple(tried))

    @property
    def value(self) -> int:
        """The answer, :attr:`most`, by its older name (0: none fits)."""
        return self.most

    @property
    def compiles(self) -> int:
        """Compiles made."""
        return len(self.points)

    @property
    def ok(self) -> bool:
        """Whether any value fits (``most`` > 0)."""
        return self.most > 0

    @property
    def max_device_bytes(self) -> int | None:
        """The budget of one device in bytes."""
        return self.budget.bytes

    @property
    def verdict(self) -> str:
        """The answer and the budget in one line, with what limits it.

        The program whose peak is over the budget one step above the answer,
        and what lifts it: a smaller ``prefill_sequences`` or ``prompt`` for
        the prefill, a smaller KV cache for the decode.
        """
        basis = f" ({self.budget.basis})" if self.budget.basis else ""
        within = f"within {format_bytes(self.budget.bytes or 0)} per device{basis}"
        also = self.also_fits
        if not also:
            head = f"Most {self.searched} that fit: {self.most}, {within}"
        else:
            unit = " sequences" if self.searched == "sequences" else " positions"
            words = answer_words("size", self.most, self.edge_size, also, unit)
            head = (
                f"{words[0].upper()}{words[1:]}: the peak is not monotone in the "
                f"{self.searched}, {within}"
            )
        return head + self._limit_words()

    def _limit_words(self) -> str:
        """``"; 8 does not: ..."``: the edge, the program over the budget, the lift."""
        edge = self.edge_size
        at = next((p for p in self.tried if p.size == edge), None)
        if at is None:
            return ""
        lift = _lift(self, at)
        if self.also_fits:  # the verdict has said the edge does not fit
            return f"; at {at.size:,} {lift}" if lift else ""
        return f"; {at.size:,} does not" + (f": {lift}" if lift else "")

    @property
    def frontier(self) -> Frontier | None:
        """Where the predicted peak per device (the larger program's) meets the budget.

        ``a + b x sequences x context`` per device, ``b`` the KV cache's bytes
        per position (exact), ``a`` fitted to the compiled points either side
        of the answer, so the curve passes between them; ``None`` without a
        budget or when nothing can fit. See
        :func:`~nnx_introspect._serve.frontier.predict_frontier`.
        """
        if self.budget.bytes is None:
            return None
        per_position = None
        if self.kv_bytes_per_token:
            per_position = self.kv_bytes_per_token / self.data_parallel
        return predict_frontier(self.points, self.budget.bytes, per_position)

    def frontier_svg(self) -> str:
        """The frontier chart as a standalone SVG document.

        Context (x) against sequences (y): every compile (green filled fits,
        red hollow does not), the answer ringed and labelled, the predicted
        frontier dashed with the region under it shaded, the budget named.
        The HTML page (:meth:`to_html`) shows it after the verdict.

        Example:
            >>> from nnx_introspect._accelerators.budget import Budget
            >>> points = ((1, 64, 50, True), (7, 64, 62, True), (8, 64, 64, False))
            >>> chart = ServeSearch("sequences", 7, 1, points, Budget(63, None))
            >>> chart.frontier_svg().startswith("<svg"), "budget 63 B per device" in \
chart.frontier_svg()
            (True, True)
        """
        return frontier_svg(
            self.points,
            self.budget.bytes or 0,
            self.searched,
            self.most,
            self.frontier,
        )

    def _after_verdict_html(self) -> str:
        """The frontier chart, right after the verdict."""
        if self.budget.bytes is None or not self.points:
            return ""
        return frontier_svg(
            self.points,
            self.budget.bytes,
            self.searched,
            self.most,
            self.frontier,
            page=True,
        )

    def json_data(self) -> dict[str, Any]:
        """The answer, the budget, every point and the frontier as JSON data."""
        frontier = self.frontier
        return {
            "searched": self.searched,
            "value": self.most,
            "step": self.step,
            "points": [list(p) for p in self.points],
            "budget_bytes": self.budget.bytes,
            "budget_basis": self.budget.basis,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "data_parallel": self.data_parallel,
            "limits": list(self.limits),
            "cached": list(self.cached),
            "frontier": None
            if frontier is None
            else {
                "sequences_x_context": frontier.product,
                "bytes_per_position": frontier.bytes_per_position,
                "fixed_bytes": frontier.fixed_bytes,
            },
            "verdict": self.verdict,
            "most": self.most,
            "edge_size": self.edge_size,
            "also_fits": list(self.also_fits),
            "tried": [p.json_data() for p in self.tried],
            "jumps": [j.json_data() for j in self.jumps],
            "prefills": [list(p) for p in self.prefills],
            "prefill_given": self.prefill_given,
        }

    def table(self) -> Table:
        """Every value tried, in the order compiled."""
        limits = self.limits or ("",) * len(self.points)
        cached = self.cached or (None,) * len(self.points)
        index = 0 if self.searched == "sequences" else 1
        by_size = {p.size: p for p in self.tried}
        rows = []
        for point, limit, hit in zip(self.points, limits, cached, strict=True):
            s, t, peak, ok = point
            at = by_size.get(point[index])
            role = "" if at is None else self.role(at)
            rows.append(
                (
                    str(s),
                    str(t),
                    format_bytes(peak) + (f" ({limit})" if limit else ""),
                    "yes" if ok else "no",
                    {True: "yes", False: "no", None: ""}[hit],
                    role,
                )
            )
        noun = "sequences count" if self.searched == "sequences" else "context"
        notes = [
            f"Each row is serve_memory_report at that value with {self._request()}: "
            "both programs compiled, fitting when both fit; the peak is the larger "
            "program's.",
            self.above_note(noun, f"{noun}s"),
            *jump_notes(self.jumps, self.searched, label="size"),
        ]
        return Table(
            title=f"Prefill and decode compiled for the most {self.searched} that fit",
            columns=(
                "sequences",
                "context",
                "peak (program)",
                "fits",
                "from cache",
                "tried as",
            ),
            rows=tuple(rows),
            lead=(self.verdict,),
            notes=tuple(n for n in notes if n),
        )

    def _request(self) -> str:
        """The prefill each value was compiled with, in words."""
        if self.prefill_given or not self.prefills:
            return "the same prompt and prefill_sequences"
        every = all(
            many == point[0]
            for (many, _), point in zip(self.prefills, self.points, strict=True)
        )
        default = "every sequence prefilled at once" if every else "its default"
        return (
            "the same prompt; prefill_sequences was not given, so the report's "
            f"default: {default} (a server admits prompts a few at a time: pass "
            "the prefill_sequences it admits)"
        )


def _lift(found: ServeSearch, point: SearchPoint) -> str:
    """The program over the budget at ``point``, and what lifts it, in words."""
    index = 0 if found.searched == "sequences" else 1
    at = [i for i, p in enumerate(found.points) if p[index] == point.size]
    shape = found.points[at[0]] if at else None
    peak = format_bytes(point.peak_bytes)
    if point.program == "prefill":
        prompts = ""
        if at and found.prefills:
            many, tokens = found.prefills[at[0]]
            prompts = f" ({many:,} prompt{'s' if many > 1 else ''} of {tokens:,} "
            prompts += "tokens prefilled at once)"
        return (
            f"prefill's peak, {peak}, is over the budget{prompts}; a smaller "
            "`prefill_sequences` (--prefill-sequences) or `prompt` (--prompt) "
            "lifts it"
        )
    if point.program == "decode":
        cache = ""
        if shape is not None:
            cache = f" (a KV cache of {shape[0]:,} sequences x {shape[1]:,} positions)"
        return (
            f"decode's peak, {peak}, is over the budget{cache}; a smaller "
            "`kv_cache` (--kv-cache) or more devices lift it"
        )
    return ""
