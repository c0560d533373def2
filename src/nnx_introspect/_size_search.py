"""What a search over one size says: its points, its answer, what lies above it.

Every search of the library compiles one size at a time and holds each compile
to a budget: :func:`~nnx_introspect.max_batch` the global batch,
:func:`~nnx_introspect.max_sequences` and :func:`~nnx_introspect.max_context`
a serving size, :func:`~nnx_introspect.rl_max_batch` the prompts per step.
Memory is not monotone in the size: XLA compiles a different program at a
different size (another fusion, another schedule, another algorithm), and a
larger size can need less than a smaller one (an H100's decode of 1,383
sequences held 5.2 GB fewer temporaries than that of 1,258). So every search
says the same things about its compiles, in one form:

- each compile is a :class:`SearchPoint`;
- the answer (:func:`edge_of`) is the largest size compiled below the smallest
  one that does not fit: every size tried up to it fits, and the next one, a
  step up, was compiled and does not (the *edge*). No compile proves that an
  untried size below fits; none below the edge was seen not to;
- past the edge, a few more sizes are compiled (:func:`probe_sizes`, about 5%,
  10% and 25% above the answer), so that a larger size that fits is found and
  named rather than denied: the answer is then stated as "every size tried up
  to 1,258 fits, 1,259 does not; 1,383 also fits" (:func:`answer_words`).
  When even the smallest size does not fit there is no answer to look above,
  and nothing past it is compiled (the budget, the mesh or the model must
  change first);
- every point whose peak is below a smaller size's is a :class:`Jump`
  (:func:`find_jumps`), with both programs' temporaries and, for the one that
  crosses the budget, the instruction at each peak (:class:`PeakAt`, read
  from a breakdown of each program).

Nothing here compiles: each search passes its own compile as a function.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from nnx_introspect._text import format_bytes
from nnx_introspect._typing import ArgumentError, typechecked

__all__ = [
    "GROWTH",
    "PROBES",
    "Jump",
    "PeakAt",
    "SearchPoint",
    "SizeSearch",
    "answer_words",
    "edge_of",
    "explain_jumps",
    "find_jumps",
    "jump_notes",
    "peak_at",
    "probe_sizes",
    "sizes_words",
]

PROBES = 3
"""How many sizes past its edge a search compiles by default (``probes=``)."""

GROWTH = (1.05, 1.10, 1.25, 1.5, 2.0)
"""Where the probes go: these multiples of the answer, each at least a step
past the one before (1,258 probes 1,320, 1,383 and 1,572)."""


class SearchPoint(NamedTuple):
    """One size a search compiled: the record every search's ``tried`` holds.

    Attributes:
        size: The size searched: the global batch, the sequences, the context
            or the prompts per step.
        peak_bytes: The peak per device: the largest program's (or phase's).
        fits: Whether every program fits the budget (and none was refused for
            memory by the compiler).
        program: The program (or phase) whose peak it is: ``"step"``,
            ``"prefill"``, ``"decode"``, ``"train"``... (``""``: not known).
        temp_bytes: That program's temporaries, XLA's ``temp_size_in_bytes``
            (``None``: not known).
        cached: Whether its programs were read from the cache of compile
            results (``None``: not known).
        probe: Whether it was compiled past the edge, to look above the
            answer, rather than to find it.

    Example:
        >>> point = SearchPoint(24, 9_000, True, "step", 1_024, False)
        >>> point.size, point.fits, point.probe
        (24, True, False)
    """

    size: int
    peak_bytes: int
    fits: bool
    program: str = ""
    temp_bytes: int | None = None
    cached: bool | None = None
    probe: bool = False

    def json_data(self) -> dict[str, Any]:
        """The point as JSON data: its fields by name."""
        return dict(self._asdict())


class PeakAt(NamedTuple):
    """Where a program peaks: the instruction there and its largest temporary.

    Attributes:
        instruction: The instruction XLA schedules at the peak.
        temporary: The largest temporary live there (its source line, else
            XLA's name), or ``None`` when none is.
        temporary_bytes: Its bytes (0 when none).

    Example:
        >>> PeakAt("sort.3", "sort.3", 4096).words()
        '`sort.3` (largest temporary sort.3, 4 KiB)'
    """

    instruction: str
    temporary: str | None = None
    temporary_bytes: int = 0

    def words(self) -> str:
        """The instruction, and the largest temporary live there, in words."""
        if self.temporary is None:
            return f"`{self.instruction}`"
        size = format_bytes(self.temporary_bytes)
        return f"`{self.instruction}` (largest temporary {self.temporary}, {size})"


class _Row(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def nbytes(self) -> int: ...


class _Breakdown(Protocol):
    """What :func:`peak_at` reads of a breakdown of a program's peak."""

    @property
    def peak_instruction(self) -> str: ...

    @property
    def rows(self) -> Sequence[_Row]: ...


def peak_at(breakdown: _Breakdown | None) -> PeakAt | None:
    """The :class:`PeakAt` of a program's breakdown (``None`` without one).

    Example:
        >>> from types import SimpleNamespace as Row
        >>> rows = (Row(kind="temporary", label="model.py:9", nbytes=64),
        ...         Row(kind="parameter", label="w", nbytes=512))
        >>> peak_at(Row(peak_instruction="dot.2", rows=rows))
        PeakAt(instruction='dot.2', temporary='model.py:9', temporary_bytes=64)
    """
    if breakdown is None:
        return None
    temporaries = [r for r in breakdown.rows if r.kind == "temporary"]
    if not temporaries:
        return PeakAt(breakdown.peak_instruction)
    largest = max(temporaries, key=lambda r: r.nbytes)
    return PeakAt(breakdown.peak_instruction, largest.label, largest.nbytes)


class Jump(NamedTuple):
    """A larger size whose peak is below a smaller size's: memory not monotone.

    Attributes:
        lower: The smaller size's point (the higher peak: the largest peak
            of any smaller size tried).
        higher: The larger size's point (the lower peak).
        lower_peak: Where the smaller size's program peaks, when read.
        higher_peak: Where the larger size's program peaks, when read.

    Example:
        >>> jump = Jump(SearchPoint(32, 900, False, "step", 600),
        ...             SearchPoint(40, 700, True, "step", 300))
        >>> print(jump.words("batch"))
        batch 40 needs less than 32: its peak (step) is 700 B against 900 B, \
with 300 B of temporaries against 600 B
    """

    lower: SearchPoint
    higher: SearchPoint
    lower_peak: PeakAt | None = None
    higher_peak: PeakAt | None = None

    @property
    def crosses(self) -> bool:
        """Whether the larger size fits where the smaller does not."""
        return self.higher.fits and not self.lower.fits

    @typechecked
    def words(self, noun: str) -> str:
        """The jump in one sentence: the peaks, the temporaries, the instructions.

        Args:
            noun: What the sizes are called, first in the sentence (``"batch"``).
        """
        _check_noun("noun", noun, "batch")
        low, high = self.lower, self.higher
        program = f" ({high.program})" if high.program else ""
        text = (
            f"{noun} {high.size:,} needs less than {low.size:,}: its peak{program} "
            f"is {format_bytes(high.peak_bytes)} against "
            f"{format_bytes(low.peak_bytes)}"
        )
        if high.temp_bytes is not None and low.temp_bytes is not None:
            text += (
                f", with {format_bytes(high.temp_bytes)} of temporaries against "
                f"{format_bytes(low.temp_bytes)}"
            )
        if self.lower_peak is not None and self.higher_peak is not None:
            text += (
                f"; XLA compiled another program: at {low.size:,} "
                f"{low.program or 'it'} peaks at {self.lower_peak.words()}, at "
                f"{high.size:,} at {self.higher_peak.words()}"
            )
        return text

    def json_data(self) -> dict[str, Any]:
        """The jump as JSON data."""
        return {
            "lower": self.lower.json_data(),
            "higher": self.higher.json_data(),
            "lower_peak": None
            if self.lower_peak is None
            else self.lower_peak._asdict(),
            "higher_peak": (
                None if self.higher_peak is None else self.higher_peak._asdict()
            ),
        }


def _check_noun(name: str, value: str, such_as: str) -> None:
    """Refuse a blank name for the size searched, naming the argument."""
    if not value.strip():
        raise ArgumentError(
            name,
            f"`{name}` must name the size searched, such as {such_as!r}; "
            f"got {value!r}.",
        )


def edge_of(points: Iterable[SearchPoint]) -> tuple[int, int | None]:
    """``(answer, edge)``: the smallest size that does not fit, the largest below it.

    The answer is 0 when no size below the edge fits; the edge is ``None``
    when every size tried fits.

    Example:
        >>> fits = {8: True, 16: True, 32: False, 24: True, 40: True, 48: False}
        >>> edge_of(SearchPoint(s, 0, ok) for s, ok in fits.items())
        (24, 32)
    """
    ordered = sorted(points, key=lambda p: p.size)
    edge = min((p.size for p in ordered if not p.fits), default=None)
    below = [p.size for p in ordered if p.fits and (edge is None or p.size < edge)]
    return max(below, default=0), edge


def probe_sizes(
    edge: int, step: int, high: int | None, count: int = PROBES
) -> tuple[int, ...]:
    """``count`` sizes past ``edge`` to compile: multiples of ``step``, to ``high``.

    Each is about a :data:`GROWTH` multiple of the answer below the edge, and
    at least a step past the one before.

    Example:
        >>> probe_sizes(1259, 1, None)
        (1320, 1383, 1572)
        >>> probe_sizes(32, 8, 48), probe_sizes(2, 1, None, 2)
        ((40, 48), (3, 4))
    """
    sizes: list[int] = []
    last, answer = edge, edge - step
    for grow in GROWTH[:count]:
        size = max(last + step, int(answer * grow) // step * step)
        if high is not None and size > high:
            break
        sizes.append(size)
        last = size
    return tuple(sizes)


def find_jumps(points: Iterable[SearchPoint]) -> tuple[Jump, ...]:
    """Every point whose peak is below that of a smaller size tried, as a jump.

    Each is paired with the smaller size of the highest peak before it.

    Example:
        >>> peaks = {8: 100, 16: 200, 24: 300, 32: 250, 40: 320}
        >>> [(j.lower.size, j.higher.size) for j in find_jumps(
        ...     SearchPoint(s, p, True) for s, p in peaks.items())]
        [(24, 32)]
    """
    jumps: list[Jump] = []
    top: SearchPoint | None = None
    for point in sorted(points, key=lambda p: p.size):
        if top is not None and point.peak_bytes < top.peak_bytes:
            jumps.append(Jump(top, point))
        if top is None or point.peak_bytes > top.peak_bytes:
            top = point
    return tuple(jumps)


def explain_jumps(
    jumps: Sequence[Jump],
    explain: Callable[[int], PeakAt | None],
    every: bool = False,
) -> tuple[Jump, ...]:
    """``jumps`` with the instruction at each peak: the first that crosses, or all.

    ``explain(size)`` gives where the program at ``size`` peaks (a search
    compiles the size again with a breakdown of its peak, or reads the one it
    has); only the first jump that crosses the budget is explained, unless
    ``every`` (the breakdowns are at hand).

    Example:
        >>> jumps = (Jump(SearchPoint(16, 9, True), SearchPoint(24, 8, True)),
        ...          Jump(SearchPoint(32, 12, False), SearchPoint(40, 10, True)))
        >>> asked = []
        >>> found = explain_jumps(jumps, lambda s: asked.append(s) or PeakAt("dot"))
        >>> asked, found[0].lower_peak, found[1].higher_peak
        ([32, 40], None, PeakAt(instruction='dot', temporary=None, temporary_bytes=0))
    """
    out = list(jumps)
    for i, jump in enumerate(out):
        if every or jump.crosses:
            lower, higher = explain(jump.lower.size), explain(jump.higher.size)
            out[i] = jump._replace(lower_peak=lower, higher_peak=higher)
            if not every:
                break
    return tuple(out)


def answer_words(
    noun: str, answer: int, edge: int | None, also: Sequence[int], unit: str = ""
) -> str:
    """The answer in words that are true of the sizes compiled.

    ``noun`` names the size (``"global batch"``), ``unit`` follows each
    number (``" sequences"``).

    Example:
        >>> answer_words("size", 1258, 1259, [1383])
        'every size tried up to 1,258 fits, 1,259 does not; 1,383 also fits'
        >>> answer_words("batch", 24, 32, [40, 56])
        'every batch tried up to 24 fits, 32 does not; 40 and 56 also fit'
        >>> answer_words("batch", 0, 8, [16])
        'batch 8, the smallest tried, does not fit; 16 fits'
    """
    if answer == 0 and edge is not None:
        text = f"{noun} {edge:,}{unit}, the smallest tried, does not fit"
    else:
        text = f"every {noun} tried up to {answer:,}{unit} fits"
        if edge is not None:
            text += f", {edge:,} does not"
    if also:
        named, verb = sizes_words(also), "fit" if len(also) > 1 else "fits"
        text += f"; {named} {verb}" if answer == 0 else f"; {named} also {verb}"
    return text


def sizes_words(sizes: Sequence[int]) -> str:
    """Sizes in words: ``"6"``, ``"6 and 8"``, ``"1,320, 1,383 and 1,572"``.

    Example:
        >>> sizes_words([6]), sizes_words([6, 8]), sizes_words([1320, 1383, 1572])
        ('6', '6 and 8', '1,320, 1,383 and 1,572')
    """
    text = [f"{s:,}" for s in sizes]
    return text[0] if len(text) == 1 else ", ".join(text[:-1]) + f" and {text[-1]}"


def jump_notes(
    jumps: Sequence[Jump], noun: str, shown: int = 3, label: str | None = None
) -> tuple[str, ...]:
    """The table's notes on the jumps: the crossing ones first, ``shown`` at most.

    ``noun`` names what the peak is not monotone in, ``label`` (default:
    ``noun``) the sizes of each jump.

    Example:
        >>> jump = Jump(SearchPoint(32, 900, False), SearchPoint(40, 700, True))
        >>> jump_notes([jump], "batch")[0].startswith("The peak is not monotone")
        True
    """
    if not jumps:
        return ()
    ordered = sorted(jumps, key=lambda j: not j.crosses)
    notes = [
        f"The peak is not monotone in the {noun} (XLA compiles a different program "
        f"at a different size): {len(jumps)} "
        f"{'sizes tried need' if len(jumps) > 1 else 'size tried needs'} less than "
        "a smaller one."
    ]
    named = (label or noun).capitalize()
    notes += [j.words(named) + "." for j in ordered[:shown]]
    if len(jumps) > shown:
        notes.append(f"({len(jumps) - shown} more in the JSON output's `jumps`.)")
    return tuple(notes)


class SizeSearch:
    """What a search's result says from its answer and its points: a mixin.

    The three searches' results (:class:`~nnx_introspect.BatchSearch`,
    :class:`~nnx_introspect.ServeSearch`, :class:`~nnx_introspect.RLBatchSearch`)
    share it: ``most`` (the answer), ``tried`` (every compile, a
    :class:`SearchPoint` each) and ``jumps``.

    Example:
        >>> from types import SimpleNamespace
        >>> class Found(SimpleNamespace, SizeSearch): pass
        >>> tried = tuple(SearchPoint(s, 0, ok) for s, ok in
        ...               ((8, True), (16, False), (24, True), (32, False)))
        >>> found = Found(most=8, tried=tried, jumps=())
        >>> found.edge_size, found.also_fits, found.probed, found.past_edge
        (16, (24,), (), (24, 32))
    """

    most: int
    tried: tuple[SearchPoint, ...]
    jumps: tuple[Jump, ...]

    @property
    def edge_size(self) -> int | None:
        """The smallest size tried above the answer that does not fit (the edge)."""
        return min(
            (p.size for p in self.tried if p.size > self.most and not p.fits),
            default=None,
        )

    @property
    def also_fits(self) -> tuple[int, ...]:
        """Every size tried above the answer that fits, ascending.

        Empty when the peak rose with the size across the edge; a size here
        fits although the edge, below it, does not.
        """
        return tuple(
            sorted(p.size for p in self.tried if p.size > self.most and p.fits)
        )

    @property
    def probed(self) -> tuple[int, ...]:
        """The sizes compiled past the edge to look above the answer, ascending.

        A probe already compiled while the edge was sought is not compiled
        again, nor listed here: :attr:`past_edge` lists every size above it.
        """
        return tuple(sorted(p.size for p in self.tried if p.probe))

    @property
    def past_edge(self) -> tuple[int, ...]:
        """Every size tried above the edge, probe or not, ascending."""
        edge = self.edge_size
        if edge is None:
            return ()
        return tuple(sorted(p.size for p in self.tried if p.size > edge))

    @typechecked
    def role(self, point: SearchPoint) -> str:
        """Why ``point`` was compiled, in a word for a table's row.

        ``"answer"``, ``"edge"`` (the smallest size above the answer that does
        not fit), ``"probe"`` (past the edge), else ``"search"``.

        Args:
            point: One of the points this search tried (:attr:`tried`).

        Example:
            >>> from types import SimpleNamespace
            >>> class Found(SimpleNamespace, SizeSearch): pass
            >>> tried = (SearchPoint(8, 0, True), SearchPoint(16, 0, False),
            ...          SearchPoint(24, 0, False, probe=True))
            >>> found = Found(most=8, tried=tried, jumps=())
            >>> [found.role(p) for p in tried]
            ['answer', 'edge', 'probe']
        """
        if point not in self.tried:
            sizes = ", ".join(f"{p.size:,}" for p in self.tried) or "none"
            raise ArgumentError(
                "point",
                f"`point` must be one of the points this search tried (sizes "
                f"{sizes}: its `tried`); got one of size {point.size!r}.",
            )
        if point.size == self.most and point.fits:
            return "answer"
        if point.size == self.edge_size:
            return "edge"
        return "probe" if point.probe else "search"

    @typechecked
    def above_note(self, noun: str, plural: str) -> str:
        """What the compiles past the edge found, in one sentence (``""``: none).

        Args:
            noun: What one size is called (``"batch"``).
            plural: Its plural (``"batches"``).

        Example:
            >>> from types import SimpleNamespace
            >>> class Found(SimpleNamespace, SizeSearch): pass
            >>> tried = (SearchPoint(8, 0, True), SearchPoint(16, 0, False),
            ...          SearchPoint(24, 0, True, probe=True),
            ...          SearchPoint(32, 0, False, probe=True))
            >>> print(Found(most=8, tried=tried, jumps=()).above_note("batch", \
"batches"))
            Past the edge (16, the smallest batch tried above the answer that \
does not fit), 2 batches were compiled too: 24 fits although 16 does not.
        """
        _check_noun("noun", noun, "batch")
        _check_noun("plural", plural, "batches")
        edge, past = self.edge_size, self.past_edge
        if edge is None or not past:
            return ""
        also = self.also_fits
        many = len(past) > 1
        count = f"{len(past)} {plural if many else noun}"
        text = (
            f"Past the edge ({edge:,}, the smallest {noun} tried above the answer "
            f"that does not fit), {count} {'were' if many else 'was'} compiled "
            "too: "
        )
        if not also:
            return text + "none fits."
        named = answer_words(noun, self.most, edge, also).split("; ", 1)[1]
        named = named.replace(" also ", " ")
        return text + f"{named} although {edge:,} does not."
