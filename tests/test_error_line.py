"""``error_line``: one copy, used by target lookup, the step and the searches.

It must survive what user code raises: ``SystemExit`` (not an ``Exception``,
its message is its code) and an exception whose ``__str__`` itself raises. The
fit search writes a worker's error with it; that path is exercised with an
executor whose futures fail, so no compile runs for the failed rows.
"""

import concurrent.futures
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import nnx_introspect as ni
from nnx_introspect._text import error_line


class _UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_plain_error_is_its_type_and_its_message_on_one_line() -> None:
    assert error_line(ValueError("bad\n   value")) == "ValueError: bad value"
    assert error_line(ValueError()) == "ValueError"


def test_system_exit_shows_its_code() -> None:
    assert error_line(SystemExit("bye")) == "SystemExit('bye')"
    assert error_line(SystemExit(3)) == "SystemExit(3)"
    assert error_line(SystemExit()) == "SystemExit(None)"


def test_an_unprintable_error_is_named_not_raised() -> None:
    assert error_line(_UnprintableError()) == "_UnprintableError: <unprintable>"


def test_a_long_message_is_cut_at_300_characters() -> None:
    line = error_line(ValueError("x" * 500))
    assert len(line) == 300 and line.endswith("...")
    assert line.startswith("ValueError: xxx")
    assert len(error_line(ValueError("x" * 100))) == len("ValueError: ") + 100


class _FailingPool(concurrent.futures.Executor):
    """Every submitted compile fails with the error ``make`` returns."""

    def __init__(self, make: Callable[[], BaseException]) -> None:
        self.make = make

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_exception(self.make())
        return future


def test_the_fit_search_writes_an_unprintable_worker_error_with_it() -> None:
    found = ni.fit_step(
        "nnx_introspect.examples:llama_tiny_sharded",
        "fsdp=8,tp=1",
        (jax.ShapeDtypeStruct((32, 256), jnp.int32),),
        loss="lm",
        optimizer="adamw",
        max_device_bytes="250MB",
        executor=_FailingPool(_UnprintableError),
    )
    failed = [row for row in found.rows if row.status == "failed"]
    assert failed and found.chosen is None
    assert {row.why for row in failed} == {"_UnprintableError: <unprintable>"}
