"""``step``'s flags checked against each other before JAX is imported.

:func:`check_step` runs right after parsing (``main`` calls a subcommand's
``check`` before it starts JAX), so a flag that needs another one, a mesh
listed twice or ``--mesh auto`` on one CPU device fails in a fraction of a
second instead of after JAX's start-up. Every message names the flag as the
user typed it. The handlers run :func:`check_one_step` and
:func:`check_compare_flags` again, for callers that skip ``main``.

What needs JAX or the model is checked in the handlers, still before anything
compiles: :func:`check_network_used` (a ``--topology`` of one host has no
network) and :func:`.preflight.check_axes_named` (a mesh axis nothing in the
step names).
"""

import argparse
import glob
import math
import os
import re
from collections.abc import Mapping, Sequence

from nnx_introspect.cli.errors import UsageError, ordinal
from nnx_introspect.cli.plan_args import mesh_axes

_ONE_STEP_FLAGS = (
    ("max_batch", "--max-batch", "searches the largest batch of one mesh"),
    ("breakdown", "--breakdown", "breaks down the peak of one step"),
    ("top", "--top", "shows the largest buffers of one step's breakdown"),
    ("measure", "--measure", "runs one step's compiled program"),
)
"""Flags of one step that a comparison of several meshes does not take."""

_DEVICE_COUNT = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def _comparing(meshes: Sequence[str]) -> bool:
    return len(meshes) > 1 or meshes[0] == "auto"


def check_step(args: argparse.Namespace) -> None:
    """Every check of ``step``'s flags that needs no JAX, in the handlers' order.

    Raises:
        UsageError: Naming the flag: ``--top`` without ``--breakdown``,
            ``--jobs`` with one mesh, a one-step flag (``--max-batch``,
            ``--breakdown``, ``--top``) with several meshes or ``auto``,
            ``auto`` beside other meshes or on one CPU device without a
            ``--topology``, a mesh listed twice or meshes of different device
            counts, ``--network-bandwidth`` without a ``--topology``...
    """
    meshes: list[str] = list(args.mesh)
    if getattr(args, "fit", False):
        from nnx_introspect.cli.fit import check_fit_flags

        check_fit_flags(args)
        if _comparing(meshes):
            _check_mesh_list(meshes)
    elif _comparing(meshes):
        check_compare_flags(args, meshes)
        if meshes == ["auto"] and args.topology is None:
            devices = _cpu_devices(os.environ)
            if devices is not None and devices < 2:
                raise UsageError(AUTO_ON_ONE_DEVICE)
        _check_mesh_list(meshes)
    else:
        check_one_step(args)
    _check_network_flag(args)


AUTO_ON_ONE_DEVICE = (
    "argument --mesh: 'auto' factors the device count of a --topology (such as "
    "h100-8 or v5e-16), and this process has 1 CPU device; give a --topology, "
    "or list the meshes"
)


def check_compare_flags(args: argparse.Namespace, meshes: Sequence[str]) -> None:
    """Refuse a one-step flag with several meshes, and ``auto`` beside others."""
    for name, flag, what in _ONE_STEP_FLAGS:
        if getattr(args, name, None) not in (None, False):
            raise UsageError(
                f"argument {flag}: {what}, not a comparison of several --mesh; "
                f"compare first, then run the best mesh with {flag}"
            )
    auto = [m for m in meshes if m.strip().lower() == "auto"]
    if auto and len(meshes) > 1:
        raise UsageError(
            "argument --mesh: 'auto' compares every factorisation of the device "
            f"count by itself; give it alone or list the meshes, got {list(meshes)}"
        )


def check_one_step(args: argparse.Namespace) -> None:
    """Refuse a flag of one step that needs another one: a usage error."""
    if getattr(args, "measure", None) is not None and args.max_batch:
        raise UsageError(
            "argument --measure: runs one step's compiled program; not with "
            "--max-batch (measure the answer's step alone)"
        )
    if args.jobs is not None:
        raise UsageError(
            "argument --jobs: compiles several meshes at once; give --mesh more "
            "than once, or --mesh auto"
        )
    if args.top is not None and not args.breakdown:
        raise UsageError(
            "argument --top: shows the largest buffers of the breakdown; add "
            "--breakdown"
        )
    if (
        args.max_batch
        and args.max_device_bytes is None
        and args.topology is None
        and not has_accelerator()
    ):
        raise UsageError(
            "argument --max-batch: needs --max-device-bytes SIZE, the per-device "
            "budget the step must fit (for example --max-device-bytes 16GiB), or "
            "a --topology whose memory gives the budget (on a machine with a TPU "
            "or GPU, the present devices' memory is the budget)"
        )
    if args.network_bandwidth is not None and args.max_batch:
        raise UsageError(
            "argument --network-bandwidth: sets the step-time estimate of one "
            "step's report; --max-batch reports memory only"
        )


def _check_network_flag(args: argparse.Namespace) -> None:
    if args.network_bandwidth is not None and args.topology is None:
        raise UsageError(
            "argument --network-bandwidth: sets the network per GPU between the hosts "
            "of a GPU --topology, and no --topology was given; name one of several "
            "hosts (such as h100-16), or leave --network-bandwidth out"
        )


def _cpu_devices(environ: Mapping[str, str]) -> int | None:
    """The devices JAX will have, when the environment says it for certain.

    ``None`` unless JAX runs on the CPU alone (``JAX_PLATFORMS`` unset, which
    ``main`` makes ``cpu``, or ``cpu``): then ``JAX_NUM_CPU_DEVICES`` when set
    (0 or more), else the last ``--xla_force_host_platform_device_count`` of
    ``XLA_FLAGS``, else 1, as ``jax`` reads them.

    Example:
        >>> _cpu_devices({}), _cpu_devices({"JAX_PLATFORMS": "cuda"})
        (1, None)
        >>> _cpu_devices({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
        8
    """
    if environ.get("JAX_PLATFORMS", "cpu").strip().lower() != "cpu":
        return None
    given = environ.get("JAX_NUM_CPU_DEVICES", "").strip()
    if given:
        try:
            number = int(given)
        except ValueError:
            return None  # JAX refuses it: let JAX say so
        if number >= 0:
            return number
    counts = _DEVICE_COUNT.findall(environ.get("XLA_FLAGS", ""))
    return int(counts[-1]) if counts else 1


def _check_mesh_list(meshes: Sequence[str]) -> None:
    """A mesh listed twice, or meshes of different device counts: one error.

    Two meshes are the same when their axes, sizes and order are, as
    ``compare_meshes`` counts a repeat (``fsdp=8`` and ``fsdp=8,tp=1`` differ).
    """
    if meshes == ["auto"]:
        return
    listed = [mesh_axes(m) for m in meshes]
    problems = []
    counts = [math.prod(s for _, s in axes) for axes in listed]
    if len(set(counts)) > 1:
        groups = {n: [i for i, m in enumerate(counts) if m == n] for n in counts}
        shown = "; ".join(f"{n} ({_nth(where)})" for n, where in groups.items())
        problems.append(
            "every --mesh must have the same number of devices (candidates for "
            f"one machine), got {shown}"
        )
    first: dict[tuple[tuple[str, int], ...], int] = {}
    for i, axes in enumerate(listed):
        if axes in first:
            problems.append(
                f"the {ordinal(i + 1)} --mesh ({meshes[i].strip()}) repeats the "
                f"{ordinal(first[axes] + 1)}"
            )
        first.setdefault(axes, i)
    if problems:
        raise UsageError(
            f"argument --mesh: {'; '.join(problems)}; give each mesh once, with "
            "the same device count"
        )


def _nth(indices: Sequence[int]) -> str:
    """``"the 1st and 3rd --mesh"`` for indices ``[0, 2]``."""
    words = [ordinal(i + 1) for i in indices]
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return f"the {listed} --mesh"


def check_network_used(args: argparse.Namespace) -> None:
    """Refuse ``--network-bandwidth`` for a ``--topology`` of one host (JAX needed).

    One host's GPUs talk over NVLink only: no estimate would read the figure.
    A TPU ``--topology`` is refused by the library (its message translated).
    """
    if args.network_bandwidth is None or args.topology is None:
        return
    from nnx_introspect._accelerators import resolve_topology

    topology = resolve_topology(args.topology)
    hosts = int(topology.compiler_topology.split("x")[1])
    if topology.platform == "cuda" and hosts == 1:
        raise UsageError(
            f"argument --network-bandwidth: --topology {args.topology} is one host "
            f"of {topology.devices} GPUs, which talk over NVLink only: no byte "
            "crosses the network, so the bandwidth would change nothing; leave "
            "--network-bandwidth out, or name a topology of several hosts (such "
            "as h100-16, two hosts of 8)"
        )


_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*")
"""Device files a TPU (``accel``, ``vfio``) or an NVIDIA GPU shows on Linux."""


def has_accelerator() -> bool:
    """Whether this machine shows a TPU or GPU device file (JAX not imported).

    ``--max-batch`` with no budget then holds the step to the present devices'
    memory (``max_batch`` reads it); on a machine with neither it is refused
    at once, before JAX starts.
    """
    return any(glob.glob(pattern) for pattern in _DEVICE_FILES)
