"""Progress on stderr: a spinner line while a compile, a search or a comparison runs.

:func:`_status` draws one line (only on a terminal) and clears it at the end;
:class:`_SearchLine` (``step --max-batch``) and :class:`_CompareLine` (``step``
with several ``--mesh``) are the lines, their text recomputed at each redraw
with the time elapsed (:func:`_duration`). Rich is imported only when a line is
drawn.
"""

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nnx_introspect._search.meshes import MeshCandidate


def _duration(seconds: float) -> str:
    """``72.4`` -> ``"1m 12s"``: whole seconds, minutes and hours.

    Example:
        >>> _duration(9.9), _duration(72.4), _duration(3725)
        ('9s', '1m 12s', '1h 02m')
    """
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m {total % 60:02d}s"
    return f"{total // 3600}h {total // 60 % 60:02d}m"


class _SearchLine:
    """The ``--max-batch`` progress line, its text recomputed at each redraw.

    Before the first compile, ``message``; from it on, the batch compiling now,
    the compile's number and the time since the search began (``compiling
    batch 24 (compile 5, 1m 12s)``), then the last batch's answer.
    """

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.clock = clock
        self.began = clock()
        self.batch: int | None = None
        self.count = 0
        self.last: tuple[int, int, bool] | None = None
        self.redraw: Callable[[], None] = lambda: None

    def compiling(self, batch: int, count: int) -> None:
        """``max_batch``'s ``compiling``: batch ``batch``, compile ``count``."""
        self.batch, self.count = batch, count
        self.redraw()

    def done(self, point: tuple[int, int, bool]) -> None:
        """``max_batch``'s ``progress``: a compile's answer."""
        self.last = point
        self.redraw()

    def text(self) -> str:
        """The line as it reads now."""
        if self.batch is None:
            return self.message
        from nnx_introspect._render.table import format_bytes

        elapsed = _duration(self.clock() - self.began)
        line = f"compiling batch {self.batch} (compile {self.count}, {elapsed})"
        if self.last is not None:
            batch, peak, fits = self.last
            verdict = "fits" if fits else "does not fit"
            line += f"; batch {batch} {verdict} ({format_bytes(peak)} per device)"
        return line

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text())  # never console markup: a target may hold "[...]"


class _CompareLine:
    """The progress line of a comparison, its text recomputed at each redraw.

    Before the compiles are submitted, ``message``; then how many have
    finished, the time since the comparison began, and the last one's answer
    (``3 of 6 meshes compiled (1m 12s); fsdp=8 fits (1.2 GiB per device)``).
    """

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.clock = clock
        self.began = clock()
        self.total: int | None = None
        self.done = 0
        self.last: "MeshCandidate | None" = None
        self.redraw: Callable[[], None] = lambda: None

    def progress(self, done: int, total: int, row: "MeshCandidate | None") -> None:
        """``compare_meshes``'s ``progress``: ``done`` of ``total`` resolved."""
        self.done, self.total = done, total
        if row is not None:
            self.last = row
        self.redraw()

    def text(self) -> str:
        """The line as it reads now."""
        if self.total is None:
            return self.message
        from nnx_introspect._render.table import format_bytes

        elapsed = _duration(self.clock() - self.began)
        line = f"{self.done} of {self.total} meshes compiled ({elapsed})"
        last = self.last
        if last is not None:
            peak = last.peak_bytes
            size = "" if peak is None else f" ({format_bytes(peak)} per device)"
            line += f"; {last.name}: {last._short_status()}{size}"
        return line

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text())  # never console markup: a target may hold "[...]"


@contextmanager
def _status(
    renderable: Any, console: Any = None, redraw_every: float = 0.25
) -> Iterator[Callable[[], None]]:
    """A spinner and ``renderable`` on one line of stderr while the body runs.

    Only when stderr is a terminal (or on the rich ``console`` given): into a
    file or a pipe, a successful run writes nothing on stderr. The line is
    redrawn every ``redraw_every`` seconds (a clock in it moves) and cleared at
    the end. Yields a function that redraws it at once (a no-op off a
    terminal).
    """
    if console is None:
        if not sys.stderr.isatty():
            yield lambda: None
            return
        from rich.console import Console

        console = Console(file=sys.stderr, force_terminal=True)
    from rich.live import Live
    from rich.spinner import Spinner

    line = Spinner("dots", text=renderable)
    with Live(
        line, console=console, refresh_per_second=1 / redraw_every, transient=True
    ) as live:
        yield live.refresh
