"""An RL step's report from its programs: the roles resident, each phase's peak.

Each role's bytes per device and the slice that holds them, each phase's
program beside the roles resident meanwhile (or waiting on the host,
offloaded), and the bytes a step moves between slices and to the host, with
their estimated times.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import hardware_for, host_link
from nnx_introspect._rl.layout import Layout
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect._step import as_model, duration, importable_name

__all__ = ["assemble", "host_time"]


def _name(model: Any) -> str:
    """A model's name as the reports give it: its import name, or its class's."""
    return importable_name(model) or type(as_model(model)).__name__


def _range(estimate: Any, times: int = 1) -> tuple[float, float] | None:
    if estimate is None:
        return None
    return estimate.low_seconds * times, estimate.high_seconds * times


def _lora_note(copy: bool, reference: bool) -> str:
    """What LoRA changes in the roles, as the report says it."""
    rollout = (
        "the rollout decodes on its own copy of the backbone in rollout_weights"
        if copy
        else "the rollout decodes on the backbone"
    )
    shared = "; the reference is that backbone (no second copy)" if reference else ""
    return (
        "LoRA: the actor trains its adapters only (no gradient or optimizer "
        f"state for the frozen backbone){shared}; {rollout}, the adapters "
        "resident beside it."
    )


def _lora_bytes(train: Any) -> int:
    """Bytes per device of the actor's ``nnx.LoRAParam`` leaves (the adapters)."""
    return sum(
        leaf.bytes_per_device for leaf in train.plan.leaves if leaf.kind == "LoRAParam"
    )


_ACTOR = "actor parameters"
_BACKBONE = "actor backbone (frozen)"
_ADAPTERS = "actor LoRA adapters"
_OPTIMIZER = "actor optimizer state"
_REFERENCE = "reference parameters"
_COPY = "rollout weights"
_CACHE = "KV cache (during the rollout)"
_CRITIC = "critic parameters"
_CRITIC_STATE = "critic optimizer state"


_Role = tuple[str, int, str]
"""``(role, bytes per device, the role whose slice holds it)``."""


def _roles(
    parts: tuple[Any, Any, Any], layout: Layout, lora: Any, valued: Any = None
) -> tuple[list[_Role], dict[str, set[str]]]:
    """Each role's resident bytes and slice, and each phase's program arguments.

    A phase's own program holds the roles it runs on (its arguments); the
    other roles on its slice stay resident beside it. A critic (``valued``:
    its values and its step) lives on its own role's slice.
    """
    rollout, train, ref = parts
    plan = train.plan.bytes_by_category
    actor = plan.get("params", 0)
    adapters = _lora_bytes(train) if lora is not None else 0
    weights = rollout.decode.weights_bytes
    # the rollout's own weights: another dtype, or devices of its own
    copy = weights != actor - adapters or not layout.shared("actor", "rollout")
    roles: list[_Role] = (
        [(_BACKBONE, actor - adapters, "actor"), (_ADAPTERS, adapters, "actor")]
        if lora is not None
        else [(_ACTOR, actor, "actor")]
    )
    roles.append((_OPTIMIZER, plan.get("optimizer state", 0), "actor"))
    # a LoRA reference is the actor's frozen backbone where they share devices
    shared = lora is not None and layout.shared("actor", "reference")
    if ref is not None and not shared:
        params = ref.plan.bytes_by_category.get("params", 0)
        roles.append((_REFERENCE, params, "reference"))
    roles.append((_COPY, weights if copy else 0, "rollout"))
    roles.append((_CACHE, rollout.decode.kv_cache_bytes, "rollout"))
    if valued is not None:
        critic = valued[1].plan.bytes_by_category
        roles.append((_CRITIC, critic.get("params", 0), "critic"))
        roles.append((_CRITIC_STATE, critic.get("optimizer state", 0), "critic"))
    backbone = {_BACKBONE, _ADAPTERS} if lora == "model" else {_BACKBONE}
    args = {
        "rollout": {_COPY} if copy else {_ACTOR, _BACKBONE},
        "reference": backbone if shared else {_REFERENCE},
        "train": {_ACTOR, _BACKBONE, _ADAPTERS, _OPTIMIZER},
        "values": {_CRITIC},
        "critic train": {_CRITIC, _CRITIC_STATE},
    }
    return roles, args


_PHASE_ROLE = {
    "prefill": "rollout",
    "decode": "rollout",
    "train": "actor",
    "values": "critic",
    "critic train": "critic",
}
"""The role whose slice a phase runs on (the reference: its own)."""


def _phase_role(phase: str) -> str:
    return _PHASE_ROLE.get(phase, phase)


def assemble(
    parts: tuple[Any, Any, Any],
    layout: Layout,
    sizes: tuple[int, int, int, int],
    notes: tuple[str, ...],
    lora: Any = None,
    offload: bool = False,
    valued: Any = None,
) -> RLMemoryReport:
    """The report: the roles resident, each phase's peak, from the programs."""
    rollout, train, ref = parts
    b, g, p, c = sizes
    roles, args = _roles(parts, layout, lora, valued)
    if lora is not None:
        copy = dict((r, n) for r, n, _ in roles)[_COPY] > 0
        notes = (*notes, _lora_note(copy, ref is not None))

    def phase(
        name: str,
        program: Any,
        oom: bool,
        seconds: Any,
        point: tuple[float, float | None, str] | None,
        measured: Any = None,
    ) -> RLPhase:
        role = _phase_role(name)
        own = args[name] if name in args else args[role]
        resident = tuple(
            (r, n)
            for r, n, home in roles
            if n and r != _CACHE and r not in own and layout.shared(home, role)
        )
        mesh = "" if layout.colocated else layout.named(role)
        runs = 1 if name != "decode" else c  # a decode run is one of c steps
        if offload:  # the idle roles wait in host memory
            resident, host = (), resident
        else:
            host = ()
        return RLPhase(
            name,
            program,
            resident,
            oom,
            seconds,
            mesh,
            host,
            measured,
            runs,
            estimate=None if point is None else point[0] * runs,
            error=None if point is None else point[1],
            basis="" if point is None else point[2],
        )

    phases = [phase(*found) for found in _phase_programs(parts, valued, c)]
    transfers, more = _transfers(rollout, phases, roles, layout, offload)
    return RLMemoryReport(
        target=rollout.target,
        mesh_axes=tuple(zip(train.plan.axis_names, train.plan.axis_sizes, strict=True)),
        topology=rollout.topology if layout.colocated else layout.topology,
        batch=b,
        generations=g,
        prompt=p,
        completion=c,
        reference=ref is not None,
        roles=tuple((r, n) for r, n, _ in roles),
        phases=tuple(phases),
        budget=rollout.budget,
        notes=(*notes, *more),
        programs={"rollout": rollout, "reference": ref, "train": train}
        | ({} if valued is None else {"values": valued[0], "critic train": valued[1]}),
        lora=lora,
        critic=None if valued is None else _name(valued[2]),
        layout=layout.words(),
        **transfers,
    )


_UNITS = {"reference": "forward (log-probabilities)", "values": "forward (values)"}
"""What one run of a forward program is (the step pipeline calls each a step)."""


def _point(estimate: Any) -> tuple[float, float | None, str] | None:
    """One run's point estimate, its error bar and basis; ``None`` without one."""
    if estimate is None or estimate.time is None:
        return None
    return estimate.time.seconds, estimate.time.error, estimate.time.basis


def _phase_programs(
    parts: tuple[Any, Any, Any], valued: Any, completion: int
) -> list[tuple[str, int, bool, Any, Any, Any]]:
    """Each phase's program in the order they run.

    ``(name, peak bytes, refused, estimated seconds, measured run)``; the
    decode's estimate is every step of a completion.
    """
    rollout, train, ref = parts
    time = rollout.time
    decode = None
    if time is not None:
        low, high = time.seconds_per_token
        decode = (low * completion, high * completion)
    ttft = None if time is None else time.time_to_first_token
    prefill, step = rollout.prefill, rollout.decode
    out = [
        (
            "prefill",
            prefill.peak_bytes,
            prefill.memory.out_of_memory,
            ttft,
            None if time is None else _point(time.prefill),
        ),
        (
            "decode",
            step.peak_bytes,
            step.memory.out_of_memory,
            decode,
            None if time is None else _point(time.decode),
        ),
    ]
    runs = [prefill.measured, step.measured]
    reports = [("reference", ref)] if ref is not None else []
    if valued is not None:
        reports.append(("values", valued[0]))
    reports.append(("train", train))
    if valued is not None:
        reports.append(("critic train", valued[1]))
    for name, report in reports:
        out.append(
            (
                name,
                report.peak_bytes,
                report.out_of_memory,
                _range(report.roofline),
                _point(report.roofline),
            )
        )
        measured = report.measured
        if measured is not None and name in _UNITS:  # a forward program's run
            measured = dataclasses.replace(measured, unit=_UNITS[name])
        runs.append(measured)
    return [(*found, run) for found, run in zip(out, runs, strict=True)]


def _transfers(
    rollout: Any,
    phases: list[RLPhase],
    roles: list[_Role],
    layout: Layout,
    offload: bool,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The bytes a step moves between slices and to the host, timed, and the notes."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    if not layout.shared("actor", "rollout"):
        where = layout.slice("rollout")
        reshard = rollout.decode.weights_bytes * where.devices
        seconds, how = _reshard_time(layout.topology, rollout.decode.weights_bytes)
        out |= {"reshard_bytes": reshard, "reshard_seconds": seconds}
        notes.append(
            f"Every step the actor's new weights reach the rollout's {where.devices} "
            f"devices ({where.label}): {reshard:,} bytes on the wire, the rollout's "
            f"weights on each of its devices{how}."
        )
    if offload:
        moved = _moved(phases, roles, layout)
        seconds, how = host_time(layout.topology, moved)
        out |= {"offload_bytes": moved, "offload_seconds": seconds}
        notes.append(
            f"Offloaded: the roles idle in a phase wait in host memory (tunix's "
            f"offload_to_cpu), each moved out and back in around its idle phases: "
            f"{moved:,} bytes per device per step over the host link{how}."
        )
    return out, tuple(notes)


def _moved(phases: list[RLPhase], roles: list[_Role], layout: Layout) -> int:
    """Bytes per device moved to and from the host per step, offloaded.

    Each role leaves its devices at the start of each run of phases it is idle
    in (on its own slice, in the step's order, wrapping to the next step) and
    comes back at its end: twice its bytes per idle run.
    """
    total = 0
    for name, n, home in roles:
        mine = [p for p in phases if layout.shared(home, _phase_role(p.name))]
        idle = [name in dict(p.host) for p in mine]
        if not n or not mine or all(idle):
            continue
        runs = sum(1 for i, x in enumerate(idle) if x and not idle[i - 1])
        total += 2 * n * runs
    return total


def host_time(
    topology: str | None, moved: int
) -> tuple[tuple[float, float] | None, str]:
    """The offload's time over one device's host link, with the words."""
    link = None if topology is None else host_link(topology)
    if topology is None:
        return None, " (not timed: no topology)"
    if link is None:
        return None, (
            f" (not timed: {topology}'s host link is not in the data sheets this "
            "library holds)"
        )
    rate, source = link
    seconds = moved / rate
    return (seconds, seconds), f", estimated {duration(seconds)} ({source})"


def _reshard_time(
    topology: str | None, per_device: int
) -> tuple[tuple[float, float] | None, str]:
    """The reshard's time, ``(low, high)``: each device receiving its weights.

    On a TPU slice over one to all of a chip's ICI links (two per torus
    dimension longer than 1); on GPUs over one GPU's NVLink (one host) or its
    network share (several). With the words saying so.
    """
    if topology is None:
        return None, " (no topology: no time estimated)"
    hw = hardware_for(topology)
    if hw.ici_bytes_per_second_per_link:
        link = hw.ici_bytes_per_second_per_link
        links = 2 * sum(1 for d in hw.torus_dims if d > 1) or 1
        span = (per_device / (links * link), per_device / link)
        gbs = link / 1e9
        return span, (
            f", estimated {duration(span[0])}-{duration(span[1])} over 1 to {links} "
            f"ICI links of {gbs:g} GB/s (the data sheet's, one direction)"
        )
    one_host = (hw.hosts or 1) == 1
    rate = hw.nvlink_bytes_per_second if one_host else hw.network_bytes_per_second
    if not rate:  # pragma: no cover - every GPU family has both figures
        return None, ""
    seconds = per_device / rate
    via = "NVLink" if one_host else "network share"
    return (seconds, seconds), (
        f", estimated {duration(seconds)} over one GPU's {via} of "
        f"{rate / 1e9:g} GB/s (the data sheet's, one direction)"
    )
