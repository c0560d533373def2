"""Benchmark: abstract model summaries against plain ``nnx.eval_shape`` and tabulate.

Run from the repository root::

    python benchmarks/speed/bench_summary.py

Every figure is a ratio of timings measured side by side in this one run, so
the machine's speed cancels out. "Summary" is ``summarize(abstract_model(f))``
(data, like ``nnx.eval_shape`` + a count); "summary + table" adds rendering the
rich table to text, as ``nnx-introspect summary`` does and as ``nnx.tabulate``
(which returns a string) does. Before timing, both paths are warmed up once on
the 36-parameter two-layer model, so no contender pays JAX's first-use costs.
It prints:

1. 7B summary time / plain ``nnx.eval_shape`` + parameter count (target <= 0.35);
2. time(64 layers) / time(16 layers), ours and plain (target for ours <= 5);
3. summary + table vs ``nnx.tabulate`` called inside ``jax.eval_shape`` (the only
   way it runs abstractly), first and fifth call (targets >= 6x and >= 10x), and
   our fifth call / first call (target <= 1.1);
4. peak RSS minus the RSS after importing jax + flax, measured in a fresh child
   process that summarizes the 7B model (target <= 40 MiB).
"""

import argparse
import dataclasses
import io
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

RSS_CHILD_FLAG = "--rss-child"


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")  # pragma: no cover


def rss_child() -> None:
    """Print peak RSS growth (KiB) of a 7B summary over the jax+flax import RSS."""
    import flax.nnx  # noqa: F401
    import jax  # noqa: F401

    baseline = _status_kib("VmRSS")
    from nnx_introspect import abstract_model, examples, summarize

    text = render(summarize(abstract_model(examples.llama_7b)))
    assert "6,738,415,616" in text
    print(_status_kib("VmHWM") - baseline)


def render(summary: Any) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=120).print(summary)
    return buffer.getvalue()


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per median")
    parser.add_argument("--calls", type=int, default=5, help="calls vs tabulate")
    args = parser.parse_args()

    import flax
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from nnx_introspect import abstract_model, examples, summarize

    def summary(factory: Callable[[nnx.Rngs], Any]) -> Any:
        return summarize(abstract_model(factory))

    def ours(factory: Callable[[nnx.Rngs], Any]) -> None:
        render(summary(factory))

    def plain(factory: Callable[[nnx.Rngs], Any]) -> None:
        model = nnx.eval_shape(lambda: factory(nnx.Rngs(0)))
        leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
        sum(int(x.size) for x in leaves)

    def tabulate(factory: Callable[[nnx.Rngs], Any]) -> None:
        out: list[str] = []

        def run() -> None:
            model = factory(nnx.Rngs(0))
            tokens = jnp.zeros((1, 8), jnp.int32)
            out.append(nnx.tabulate(model, tokens, console_kwargs={"width": 120}))

        # A fresh callable each time: jax.eval_shape caches traces per function.
        jax.eval_shape(lambda: run())
        assert out and "Total" in out[0]

    def tabulate_tiny(factory: Callable[[nnx.Rngs], Any]) -> None:
        jax.eval_shape(
            lambda: nnx.tabulate(factory(nnx.Rngs(0)), jnp.ones((1, 3))) and None
        )

    def median(fn: Callable[[], Any], n: int) -> float:
        return statistics.median(timed(fn) for _ in range(n))

    def layers(n: int) -> Callable[[nnx.Rngs], Any]:
        return examples.llama(dataclasses.replace(examples.LLAMA_7B, n_layers=n))

    print(f"jax {jax.__version__}, flax {flax.__version__}, {os.cpu_count()} CPUs")
    print()

    for warm in (ours, plain, tabulate_tiny):
        warm(examples.two_layer)

    ours_calls = [timed(lambda: ours(examples.llama_7b)) for _ in range(args.calls)]
    summary_7b = median(lambda: summary(examples.llama_7b), args.repeats)
    plain_7b = median(lambda: plain(examples.llama_7b), args.repeats)
    table_7b = statistics.median(ours_calls)
    print("1. Llama-7B (291 leaves): summary vs plain nnx.eval_shape + count")
    print(
        f"   summary {summary_7b:.3f} s (+ table: {table_7b:.3f} s), "
        f"plain {plain_7b:.3f} s"
    )
    print(f"   ratio summary/plain = {summary_7b / plain_7b:.2f}   (target <= 0.35)")
    print()

    ours16 = median(lambda: summary(layers(16)), args.repeats)
    ours64 = median(lambda: summary(layers(64)), args.repeats)
    plain16 = median(lambda: plain(layers(16)), 1)
    plain64 = median(lambda: plain(layers(64)), 1)
    print("2. Scaling: 16 layers (147 leaves) -> 64 layers (579 leaves)")
    print(
        f"   ours  {ours16:.3f} s -> {ours64:.3f} s: ratio {ours64 / ours16:.2f}"
        "   (target <= 5; linear is 3.9)"
    )
    print(f"   plain {plain16:.3f} s -> {plain64:.3f} s: ratio {plain64 / plain16:.2f}")
    print()

    tab_calls = [timed(lambda: tabulate(examples.llama_7b)) for _ in range(args.calls)]
    print("3. Llama-7B summary + table vs nnx.tabulate inside jax.eval_shape")
    for i, (a, b) in enumerate(zip(ours_calls, tab_calls, strict=True), 1):
        print(f"   call {i}: ours {a:.3f} s, tabulate {b:.3f} s, speed-up {b / a:.1f}x")
    print(f"   first call speed-up {tab_calls[0] / ours_calls[0]:.1f}x   (target >= 6)")
    print(
        f"   call {args.calls} speed-up {tab_calls[-1] / ours_calls[-1]:.1f}x"
        "   (target >= 10)"
    )
    print(
        f"   ours call {args.calls} / call 1 = {ours_calls[-1] / ours_calls[0]:.2f}"
        "   (target <= 1.1)"
    )
    print(
        f"   tabulate call {args.calls} / call 1 = {tab_calls[-1] / tab_calls[0]:.2f}"
    )
    print()

    child = subprocess.run(
        [sys.executable, __file__, RSS_CHILD_FLAG],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    growth_kib = int(child.stdout.strip().splitlines()[-1])
    print("4. Memory: peak RSS - RSS after importing jax + flax (fresh process)")
    print(f"   {growth_kib / 1024:.1f} MiB for the 25 GiB 7B model   (target <= 40)")


if __name__ == "__main__":
    if RSS_CHILD_FLAG in sys.argv:
        rss_child()
    else:
        main()
