"""Progress on stderr: a spinner line while a compile, a search or a comparison runs.

:func:`live_status` draws one line on a terminal and clears it at the end; into
a file or a pipe it writes plain lines instead, once the work has run longer
than :data:`QUIET_SECONDS` (a quick run writes nothing), then at each step of
a search and at least every :data:`EVERY_SECONDS`, and a last line with the
time it took;
:class:`SearchLine` (``step --max-batch``) and :class:`CompareLine` (``step``
with several ``--mesh``) are the lines, their text recomputed at each redraw
with the time elapsed (:func:`_duration`) and, for a comparison, the meshes
compiling and the time left (:func:`_left`). Rich is imported only when a line is
drawn.
"""

import heapq
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nnx_introspect._sweep import MeshCandidate

QUIET_SECONDS = 15.0
"""Into a file or a pipe: a run shorter than this writes no progress at all."""

EVERY_SECONDS = 30.0
"""Into a file or a pipe: after the quiet time, a line at least this often."""

PROGRESS_ENV = "NNX_INTROSPECT_PROGRESS"
"""``off`` (or ``0``, ``false``, ``no``): no progress lines into a file or a pipe."""


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


def _left(seconds: float) -> str:
    """Time left, coarse so the line does not flicker: ``"about 2m left"``.

    Example:
        >>> _left(42), _left(100), _left(3725)
        ('under 1m left', 'about 2m left', 'about 1h 02m left')
    """
    if seconds < 60:
        return "under 1m left"
    if seconds < 3600:
        return f"about {round(seconds / 60)}m left"
    return f"about {_duration(seconds)} left"


def _one_line(text: str) -> Any:
    """``text`` as a progress line: one line, cut with "…" at the console's width.

    Wrapped onto a second line, a redrawn line leaves its first half behind
    on a terminal narrower than it; cut, it stays within the width. Plain
    text, never console markup: a target may hold ``[...]``.
    """
    from rich.text import Text

    return Text(text, no_wrap=True, overflow="ellipsis")


class ClockLine:
    """A line with the time since it began: ``Compiling the step... (12s)``.

    ``note`` (set by :meth:`fitted`, ``step --fit``'s progress) follows it:
    how many compiles finished and the last one's answer.

    Example:
        >>> ticks = iter([0.0, 72.0])
        >>> line = ClockLine("Compiling...", clock=lambda: next(ticks))
        >>> line.text()
        'Compiling... (1m 12s)'
    """

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message, self.clock = message, clock
        self.began = clock()
        self.note = ""
        self.redraw: Callable[[], None] = lambda: None

    def fitted(self, done: int, submitted: int, row: Any) -> None:
        """``fit_step``'s ``progress``: ``done`` of ``submitted`` compiled."""
        self.note = (
            f"; {done} of {submitted} compiled; {row.name} with {row.options}: "
            f"{row.status}"
        )
        self.redraw()

    def text(self) -> str:
        """The line as it reads now."""
        return f"{self.message} ({_duration(self.clock() - self.began)}){self.note}"

    def __rich__(self) -> Any:
        return _one_line(self.text())


class SearchLine:
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
        from nnx_introspect._render import format_bytes

        elapsed = _duration(self.clock() - self.began)
        line = f"compiling batch {self.batch} (compile {self.count}, {elapsed})"
        if self.last is not None:
            batch, peak, fits = self.last
            verdict = "fits" if fits else "does not fit"
            line += f"; batch {batch} {verdict} ({format_bytes(peak)} per device)"
        return line

    def __rich__(self) -> Any:
        return _one_line(self.text())


class CompareLine:
    """The progress line of a comparison, its text recomputed at each redraw.

    Before the compiles are submitted, ``message``; then how many have
    finished, the time since the comparison began, and the last one's answer
    (``3 of 6 meshes compiled (1m 12s); fsdp=8 fits (1.2 GiB per device)``).
    Told by :meth:`compiling` what compiles now, it names those meshes and,
    once a compile finished, gives the time left (``1 of 9 meshes compiled
    (47s, about 2m left); compiling fsdp=4,tp=2, fsdp=2,tp=4; ...``).
    """

    SHOWN = 3
    """Meshes named as compiling at most; the others are counted."""

    def __init__(
        self, message: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.clock = clock
        self.began = clock()
        self.total: int | None = None
        self.done = 0
        self.last: "MeshCandidate | None" = None
        self.names: tuple[str, ...] = ()
        self.seconds: tuple[float, ...] = ()
        self.seen: dict[str, float] = {}
        self.jobs = 0
        self.redraw: Callable[[], None] = lambda: None

    def progress(self, done: int, total: int, row: "MeshCandidate | None") -> None:
        """``compare_meshes``'s ``progress``: ``done`` of ``total`` resolved."""
        self.done, self.total = done, total
        if row is not None:
            self.last = row
        self.redraw()

    def compiling(self, names: tuple[str, ...], seconds: tuple[float, ...]) -> None:
        """The comparison's ``compiling``: what compiles now, what took how long."""
        now = self.clock()
        self.seen = {name: self.seen.get(name, now) for name in names}
        self.names, self.seconds = names, seconds
        self.jobs = max(self.jobs, len(names))
        self.redraw()

    def left(self) -> float | None:
        """Seconds left, or ``None`` before a compile finished.

        Each compile to come takes the mean of those finished; one compiling
        now takes what the mean leaves of it; each goes to the first of the
        parallel jobs (the most compiling at once) to be free.
        """
        if not self.seconds or self.total is None:
            return None
        mean = sum(self.seconds) / len(self.seconds)
        now = self.clock()
        free = [max(mean - (now - self.seen[name]), 0.0) for name in self.names]
        free += [0.0] * (max(self.jobs, 1) - len(free))
        heapq.heapify(free)
        for _ in range(self.total - len(self.seconds) - len(self.names)):
            heapq.heapreplace(free, free[0] + mean)
        return max(free)

    def text(self) -> str:
        """The line as it reads now."""
        if self.total is None:
            return self.message
        from nnx_introspect._render import format_bytes

        elapsed = _duration(self.clock() - self.began)
        left = self.left()
        if left is not None:
            elapsed += f", {_left(left)}"
        done = max(self.done, len(self.seconds))
        line = f"{done} of {self.total} meshes compiled ({elapsed})"
        if self.names:
            shown = ", ".join(self.names[: self.SHOWN])
            more = len(self.names) - self.SHOWN
            line += f"; compiling {shown}" + (f" and {more} more" if more > 0 else "")
        last = self.last
        if last is not None:
            peak = last.peak_bytes
            size = "" if peak is None else f" ({format_bytes(peak)} per device)"
            line += f"; {last.name}: {last._short_status()}{size}"
        return line

    def __rich__(self) -> Any:
        return _one_line(self.text())


@contextmanager
def live_status(
    renderable: Any,
    console: Any = None,
    redraw_every: float = 0.25,
    *,
    stream: Any = None,
    quiet_seconds: float | None = None,
    every: float | None = None,
) -> Iterator[Callable[[], None]]:
    """A spinner and ``renderable`` on one line of stderr while the body runs.

    On a terminal (or on the rich ``console`` given) the line is redrawn every
    ``redraw_every`` seconds (a clock in it moves) and cleared at the end.
    Into a file or a pipe (``stream``, default stderr), plain lines
    (:func:`plain_lines`, after ``quiet_seconds``, default
    :data:`QUIET_SECONDS`, then every ``every``, default
    :data:`EVERY_SECONDS`); into a stream that is neither (a ``StringIO``,
    pytest's capture) nothing. Yields a function that redraws the line at once
    (for a search: a step done).
    """
    own = None
    if console is None:
        out = sys.stderr if stream is None else stream
        own = _own_descriptor(out)
        if not out.isatty():
            with ExitStack() as stack:
                if own is not None:
                    stack.callback(own.close)
                if not _a_file(out) or _progress_off():
                    yield lambda: None
                    return
                quiet = QUIET_SECONDS if quiet_seconds is None else quiet_seconds
                often = EVERY_SECONDS if every is None else every
                written = out if own is None else own
                with plain_lines(renderable, written, quiet, often) as redraw:
                    yield redraw
            return
        from rich.console import Console

        console = Console(file=out if own is None else own, force_terminal=True)
    from rich.live import Live
    from rich.spinner import Spinner

    line = Spinner("dots", text=renderable)
    try:
        with Live(
            line, console=console, refresh_per_second=1 / redraw_every, transient=True
        ) as live:
            yield live.refresh
    finally:
        if own is not None:
            own.close()


def _own_descriptor(stream: Any) -> Any:
    """A text stream on a copy of ``stream``'s file descriptor, or ``None``.

    The body of :func:`live_status` may point descriptor 2 elsewhere for a
    while (the compiler and a measured run write their native logs there,
    captured: :func:`~nnx_introspect._xla.native_stderr_captured`); the
    line, written to a copy taken before, still reaches the terminal (or the
    file) as the work runs, not when the capture ends. ``None`` for a stream
    without a descriptor (a ``StringIO``).

    Example:
        >>> import io
        >>> _own_descriptor(io.StringIO()) is None
        True
    """
    try:
        descriptor = stream.fileno()
        stream.flush()
        copy = os.dup(descriptor)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation too
        return None
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return os.fdopen(copy, "w", encoding=encoding, errors="replace")


def _a_file(stream: Any) -> bool:
    """Whether ``stream`` writes to a file or a pipe (it has a file descriptor)."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation too
        return False
    return True


def _progress_off() -> bool:
    setting = os.environ.get(PROGRESS_ENV, "").strip().lower()
    return setting in ("off", "0", "false", "no")


@contextmanager
def plain_lines(
    renderable: Any,
    stream: Any,
    quiet_seconds: float = QUIET_SECONDS,
    every: float = EVERY_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Callable[[], None]]:
    """Progress as plain lines on ``stream`` (a file or a pipe), never redrawn.

    Nothing for the first ``quiet_seconds``; then the line's text (its
    ``text()``, prefixed with the program's name), again at each redraw the
    body asks for (a search's step, at most one a second) and at least every
    ``every`` seconds; when the body ends, a last line with the time taken,
    if any line was written.
    """
    from nnx_introspect.cli.args import PROG

    began = clock()
    lock = threading.Lock()
    state: dict[str, Any] = {"last": None, "at": began}
    stop = threading.Event()

    def text() -> str:
        shown = renderable.text() if hasattr(renderable, "text") else str(renderable)
        return " ".join(str(shown).split())

    def write(line: str) -> None:
        with lock:
            try:
                stream.write(f"{PROG}: {line}\n")
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: no progress
                stop.set()
                return
            state["last"], state["at"] = line, clock()

    def redraw() -> None:
        now = clock()
        if now - began < quiet_seconds or now - state["at"] < 1.0:
            return
        line = text()
        if line != state["last"]:
            write(line)

    def beat() -> None:
        wait = quiet_seconds
        while not stop.wait(max(wait, 0.05)):
            write(text())
            wait = every

    thread = threading.Thread(target=beat, name="nnx-introspect progress", daemon=True)
    thread.start()
    try:
        yield redraw
    finally:
        stop.set()
        thread.join()
    if state["last"] is not None:
        message = getattr(renderable, "message", None) or text()
        write(f"{message} done ({_duration(clock() - began)})")
