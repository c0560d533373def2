"""Mistakes every command can make, refused before JAX or the model loads.

:func:`check_early` runs in :func:`~nnx_introspect.cli.entry.main` right after
the arguments are parsed, before a subcommand's own ``check`` and before JAX
starts: a fraction of a second, where the library would find the same mistake
only after JAX's start-up and the model's build (3 to 13 seconds). Each is the
one line the library would give, in the flags' words:

- a TARGET (or ``--model``, ``--loss``, ``--critic``, ``--init-cache``,
  ``--decode``, ``diff``'s A and B) that is not ``package.module:callable``,
  whose module is nowhere on the import path, or whose module's source does
  not define the name (with the closest one:
  :func:`~nnx_introspect._targets.check_target`);
- a checkpoint PATH (or ``diff`` operand) that does not exist;
- a ``--topology`` no family holds, and a ``--mesh`` whose devices are not
  its devices (:mod:`.topology_names`);
- a ``--batch`` dtype that is no dtype (:mod:`.dtypes`);
- ``--network-bandwidth`` for a TPU ``--topology`` or one host of GPUs;
- ``--measure`` on a mesh larger than this process's CPU devices, or for a
  ``--topology`` while JAX runs on the CPU (:func:`.checks._cpu_devices`
  predicts them as JAX will count them);
- ``serve``'s ``--sequences`` (or ``--prefill-sequences``) that do not split
  over the mesh's data-parallel axes (every axis but ``tp``, ``tensor``,
  ``model``).

Nothing here imports JAX, NumPy or the user's code.
"""

import argparse
import math
import os

from nnx_introspect._targets import DEFAULT_TARGET, TargetError, check_target
from nnx_introspect._text import plural
from nnx_introspect.cli.checks import _cpu_devices
from nnx_introspect.cli.dtypes import check_dtype
from nnx_introspect.cli.errors import UsageError, ordinal, with_default
from nnx_introspect.cli.plan_args import mesh_axes
from nnx_introspect.cli.topology_names import topology_devices

__all__ = ["check_early"]

_CALLABLE_FLAGS = (
    ("loss", "--loss"),
    ("critic", "--critic"),
    ("init_cache", "--init-cache"),
    ("decode", "--decode"),
)
"""Flags that name a ``package.module:function`` of the user's."""

_MESH_DEFAULT = "tp=8"
"""``serve``'s and ``rl``'s ``--mesh`` when none is given."""


def check_early(args: argparse.Namespace) -> None:
    """Refuse what the flags alone show is wrong; see the module's docstring.

    Raises:
        TargetError: A TARGET, ``diff`` operand or checkpoint PATH that names
            nothing (exit 2, as when the library finds it).
        UsageError: Naming the flag: a callable flag that names nothing, a
            ``--topology`` no family holds, a mesh of another size than the
            topology or a ``--batch`` dtype (a ``--max-device-bytes`` without
            its unit is argparse's: every command reads it with
            :func:`.plan_args.bytes_arg`).
    """
    command = getattr(args, "command", None)
    if command in ("summary", "mesh", "step", "serve", "rl"):
        check_target(args.target)
    if command == "checkpoint":
        _check_checkpoint(args.path, "PATH")
        if args.model is not None:
            check_target(args.model, "--model")
    if command == "diff":
        for operand, what in ((args.a, "A"), (args.b, "B")):
            _check_operand(operand, what)
    for dest, flag in _CALLABLE_FLAGS:
        value = getattr(args, dest, None)
        if isinstance(value, str) and ":" in value:
            try:
                check_target(value, flag)
            except TargetError as error:
                raise UsageError(f"argument {flag}: {error}") from None
    batch = getattr(args, "batch", None) if command == "step" else None
    for name, _ in batch or ():
        try:
            check_dtype(name)
        except ValueError as error:
            raise UsageError(f"argument --batch: {error}") from None
    topology = getattr(args, "topology", None)
    if isinstance(topology, str):
        try:
            devices = topology_devices(topology)
        except ValueError as error:
            raise UsageError(f"argument --topology: {error}") from None
        _check_mesh_devices(args, command, topology, devices)
        _check_network(args, topology, devices)
    _check_measure(args, command)
    if command == "serve":
        _check_sequences_split(args)


def _check_checkpoint(path: str, what: str) -> None:
    """A checkpoint directory that is not there (its contents are the library's)."""
    if not os.path.exists(os.path.expanduser(path)):
        raise TargetError(
            f"{what} {path!r} does not exist. Pass the directory an orbax "
            "checkpointer saved to (the one holding a _METADATA file)."
        )


def _check_operand(operand: str, what: str) -> None:
    """``diff``'s A or B: an existing checkpoint directory, or a target."""
    if os.path.exists(os.path.expanduser(operand)):
        return
    if ":" not in operand:
        raise TargetError(
            f"{operand!r} is neither an existing checkpoint directory nor a target "
            f"like 'package.module:callable' (for example {DEFAULT_TARGET})."
        )
    check_target(operand, what)


def _meshes(args: argparse.Namespace, command: str | None) -> list[str]:
    """The meshes the command compiles on the whole topology (not ``auto``)."""
    given = getattr(args, "mesh", None)
    if command == "serve" and given is None:
        given = [_MESH_DEFAULT]
    if command == "rl" and getattr(args, "role_mesh", None):
        return []  # slices of the topology: the library checks their sum
    if isinstance(given, str):
        given = [given]
    return [m for m in given or () if m.strip().lower() != "auto"]


def _check_mesh_devices(
    args: argparse.Namespace, command: str | None, topology: str, devices: int
) -> None:
    """A mesh whose devices are not the topology's: refused, naming both.

    One mesh, as the compile would refuse it (naming ``--topology``); several
    (``step`` comparing them), each that differs, as the comparison would
    (naming ``--mesh``).
    """
    if command not in ("step", "serve", "rl"):
        return
    meshes = _meshes(args, command)
    counts = [math.prod(size for _, size in mesh_axes(m)) for m in meshes]
    if len(meshes) > 1:
        wrong = [
            f"the {ordinal(i + 1)} --mesh ({m.strip()}) has {plural(n, 'device')}, but "
            f"--topology {topology} has {devices}"
            for i, (m, n) in enumerate(zip(meshes, counts, strict=True))
            if n != devices
        ]
        if wrong:
            raise UsageError(
                f"argument --mesh: {'; '.join(wrong)}. Give each candidate once, "
                f"with the same device count as --topology {topology}."
            )
        return
    has = plural(devices, "GPU")
    if topology[:1] == "v":
        has = f"{plural(devices, 'chip')} (one JAX device each)"
    for text, n in zip(meshes, counts, strict=True):
        if n != devices:
            message = (
                f"--topology {topology} has {has} but --mesh "
                f"{text.strip()} has {plural(n, 'device')}. Make the mesh's axis sizes "
                "multiply to the device count, or pick another topology."
            )
            raise UsageError(
                f"argument --topology: {with_default(message, args, '--mesh')}"
            )


def _check_network(args: argparse.Namespace, topology: str, devices: int) -> None:
    """``--network-bandwidth`` where no byte crosses a network between hosts."""
    if getattr(args, "network_bandwidth", None) is None:
        return
    if topology[:1] == "v":  # a TPU slice
        raise UsageError(
            "argument --network-bandwidth: --network-bandwidth is the network "
            f"between GPU hosts, but --topology is {topology}. Pass a GPU --topology "
            "such as h100-256, or leave --network-bandwidth out."
        )
    if devices <= 8:  # one host's GPUs talk over NVLink only
        raise UsageError(
            f"argument --network-bandwidth: --topology {topology} is one host of "
            f"{devices} GPUs, which talk over NVLink only: no byte crosses the "
            "network, so the bandwidth would change nothing; leave "
            "--network-bandwidth out, or name a topology of several hosts (such "
            "as h100-16, two hosts of 8)"
        )


_MEASURED = {"step": "the step", "serve": "the programs", "rl": "the step"}


def _check_measure(args: argparse.Namespace, command: str | None) -> None:
    """``--measure`` where this process's CPU devices cannot run the program.

    Only when JAX will run on the CPU alone (its devices are then known
    before it starts); an accelerator's are counted by the library.
    """
    runs = getattr(args, "measure", None)
    present = _cpu_devices(os.environ)
    if runs is None or present is None or command not in _MEASURED:
        return
    what = _MEASURED[command]
    topology = getattr(args, "topology", None)
    if topology is not None:
        raise UsageError(
            f"argument --measure: --measure {runs} runs {what} on this process's "
            f"devices, {present} x 'cpu', which are not --topology {topology}. Run "
            "it where the topology's devices are, pass no --topology to measure on "
            "these, or leave --measure out."
        )
    for text in _meshes(args, command):
        needed = math.prod(size for _, size in mesh_axes(text))
        if needed > present:
            message = (
                f"--measure {runs} runs {what} on this process's devices, but "
                f"--mesh {text.strip()} needs {needed} and this process has "
                f"{present} (cpu). Measure on a machine with the mesh's devices, "
                "or leave --measure out."
            )
            raise UsageError(
                f"argument --measure: {with_default(message, args, '--mesh')}"
            )


_TENSOR_PARALLEL = ("tp", "tensor", "model")
"""``serve``'s axes that split the KV heads (the library's
``TENSOR_PARALLEL_AXES``); every other axis splits the sequences."""


def _check_sequences_split(args: argparse.Namespace) -> None:
    """``serve``'s sequences over one mesh's data-parallel devices (no search)."""
    meshes = _meshes(args, "serve")
    sequences = getattr(args, "sequences", None)
    if len(meshes) != 1 or len(args.mesh or ()) > 1 or sequences is None:
        return
    if args.max_sequences or args.max_context:
        return
    prefill = args.prefill_sequences or sequences
    if prefill > sequences:
        raise UsageError(
            f"argument --prefill-sequences: --prefill-sequences {prefill} is more "
            f"than --sequences {sequences}. Pass at most {sequences}."
        )
    dp = math.prod(s for a, s in mesh_axes(meshes[0]) if a not in _TENSOR_PARALLEL)
    if sequences % dp or prefill % dp:
        admitted = "" if prefill == sequences else f" (--prefill-sequences {prefill})"
        message = (
            f"--sequences {sequences}{admitted} does not split over the {dp} "
            f"data-parallel devices of the mesh. Pass a multiple of {dp}."
        )
        raise UsageError(
            f"argument --sequences: {with_default(message, args, '--mesh')}"
        )
