"""How much cheaper is checking a checkpoint's metadata than restoring it?

Saves one checkpoint (an MLP of about 64 MiB of float32 by default), then times,
side by side in this one run, ``checkpoint_report`` and ``check_checkpoint``
(metadata only) against ``verify_restore`` (a full restore plus a value
comparison) and a plain orbax restore. Prints the ratios.

    python benchmarks/speed/checkpoint_metadata.py [--width 2048] [--layers 4]
        [--repeat 5]
"""

import os

# The CPU is all this measures; with libtpu installed, JAX would probe for a TPU.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import pathlib
import tempfile
import time
from collections.abc import Callable

import orbax.checkpoint as ocp
from flax import nnx

import nnx_introspect as ni


class MLP(nnx.Module):
    def __init__(self, width: int, layers: int, rngs: nnx.Rngs) -> None:
        self.layers = nnx.List(
            [nnx.Linear(width, width, rngs=rngs) for _ in range(layers)]
        )


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # orbax returns restored arrays once they are read
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    model = MLP(args.width, args.layers, nnx.Rngs(0))
    abstract = nnx.eval_shape(lambda: MLP(args.width, args.layers, nnx.Rngs(0)))
    path = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nnx.state(model))
    nbytes = ni.checkpoint_report(path).nbytes

    def plain_restore() -> object:
        with ocp.StandardCheckpointer() as checkpointer:
            return checkpointer.restore(path, nnx.state(abstract))

    timings = {
        "checkpoint_report (metadata)": best(
            lambda: ni.checkpoint_report(path), args.repeat
        ),
        "check_checkpoint (metadata)": best(
            lambda: ni.check_checkpoint(path, abstract), args.repeat
        ),
        "orbax restore": best(plain_restore, args.repeat),
        "verify_restore (restore + compare)": best(
            lambda: ni.verify_restore(path, model), args.repeat
        ),
    }
    base = timings["check_checkpoint (metadata)"]
    print(f"checkpoint: {nbytes / 2**20:.1f} MiB, best of {args.repeat}")
    for name, seconds in timings.items():
        ratio = seconds / base
        print(f"{name:36s} {seconds * 1e3:9.1f} ms  {ratio:7.1f}x check_checkpoint")


if __name__ == "__main__":
    main()
