"""An RL step's report from its programs: the roles resident, each phase's peak.

Each role's bytes per device and the slice that holds them, each phase's
program beside the roles resident meanwhile (or waiting on the host,
offloaded), and the bytes a step moves between slices and to the host, with
their estimated times.
"""

import dataclasses
from typing import Any

from nnx_introspect._accelerators import hardware_for, host_link
from nnx_introspect._rl.choices import Chosen, choice_notes
from nnx_introspect._rl.layout import Layout
from nnx_introspect._rl.programs import RLPrograms
from nnx_introspect._rl.report import RLMemoryReport, RLPhase
from nnx_introspect._rl.spec import RLSpec
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
        "the rollout decodes on its own copy of the backbone"
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

_ON_DEVICE = frozenset({_OPTIMIZER, _CRITIC_STATE})
"""What offloading leaves on the device: tunix's ``offload_to_cpu`` moves each
model's variables (``nnx.variables(model)``), never a trainer's optimizer."""


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
    # the rollout's own weights: cast to another dtype, or on devices of its own
    cast = rollout.weights is not None and weights != actor - adapters
    copy = cast or not layout.shared("actor", "rollout")
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
    if copy:  # colocated in the actor's dtypes, the rollout is the actor
        roles.append((_COPY, weights, "rollout"))
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


def assemble(spec: RLSpec, programs: RLPrograms) -> RLMemoryReport:
    """The report of ``spec``'s step from its programs, compiled and read.

    The request's choices where tunix has its own, completed with what the
    rollout compiled (its weights' and KV cache's dtypes).
    """
    rollout = programs.rollout
    chosen = dataclasses.replace(
        spec.chosen,
        rollout_weights=rollout.weights,
        kv_cache=rollout.kv_cache,
        own_kv_cache=spec.own_kv_cache,
    )
    valued = None
    if programs.values is not None:
        valued = (programs.values, programs.critic_train, spec.critic)
    return _report(
        (rollout, programs.train, programs.reference),
        spec.layout,
        (spec.batch, spec.generations, spec.prompt, spec.completion),
        programs.notes,
        (spec.lora, spec.offload, chosen),
        valued,
    )


def _report(
    parts: tuple[Any, Any, Any],
    layout: Layout,
    sizes: tuple[int, int, int, int],
    notes: tuple[str, ...],
    options: tuple[Any, bool, Chosen] = (None, False, Chosen()),
    valued: Any = None,
) -> RLMemoryReport:
    """The report: the roles resident, each phase's peak, from the programs.

    ``options`` are the request's ``lora``, ``offload`` and its other choices
    (:class:`~nnx_introspect._rl.choices.Chosen`).
    """
    rollout, train, ref = parts
    lora, offload, chosen = options
    b, g, p, c = sizes
    roles, args = _roles(parts, layout, lora, valued)
    copy = any(r == _COPY for r, _, _ in roles)
    notes = (*notes, *choice_notes(chosen, layout.colocated, copy, lora))
    if lora is not None:
        notes = (*notes, _lora_note(copy, ref is not None))

    phases = [
        _phase(found, (roles, args), layout, offload, c)
        for found in _phase_programs(parts, valued, c)
    ]
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
        compiler=rollout.compiler,
        backend=rollout.backend,
        warnings=_warnings(rollout, [train, ref, *(valued or ())[:2]]),
        **transfers,
    )


def _phase(
    found: tuple[Any, ...],
    held: tuple[list[_Role], dict[str, set[str]]],
    layout: Layout,
    offload: bool,
    completion: int,
) -> RLPhase:
    """One phase: its program's figures and what the other roles keep resident.

    ``found`` is one of :func:`_phase_programs`' tuples; ``held`` the roles
    resident (:func:`_roles`) and each program's own arguments among them, by
    phase or role. With ``offload``, the idle models wait in host memory
    meanwhile and the optimizers stay on the device.
    """
    name, program, oom, seconds, point, measured, compiled = found
    roles, args = held
    role = _phase_role(name)
    own = args[name] if name in args else args[role]
    resident = tuple(
        (r, n)
        for r, n, home in roles
        if n and r != _CACHE and r not in own and layout.shared(home, role)
    )
    mesh = "" if layout.colocated else layout.named(role)
    runs = 1 if name != "decode" else completion  # a decode run is one step
    host: tuple[tuple[str, int], ...] = ()
    if offload:  # the idle models wait in host memory, optimizers stay
        host = tuple((r, n) for r, n in resident if r not in _ON_DEVICE)
        resident = tuple((r, n) for r, n in resident if r in _ON_DEVICE)
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
        compile_seconds=compiled[0],
        cached=compiled[1],
        compiled_in=compiled[2],
    )


def _warnings(rollout: Any, steps: list[Any]) -> tuple[str, ...]:
    """The programs' warnings, each once, in the order the phases run."""
    found = [*rollout.prefill.warnings, *rollout.decode.warnings]
    for report in steps:
        if report is not None:
            found.extend(report.warnings)
    return tuple(dict.fromkeys(found))


_UNITS = {"reference": "forward (log-probabilities)", "values": "forward (values)"}
"""What one run of a forward program is (the step pipeline calls each a step)."""


def _point(estimate: Any) -> tuple[float, float | None, str] | None:
    """One run's point estimate, its error bar and basis; ``None`` without one."""
    if estimate is None or estimate.time is None:
        return None
    return estimate.time.seconds, estimate.time.error, estimate.time.basis


def _phase_programs(
    parts: tuple[Any, Any, Any], valued: Any, completion: int
) -> list[tuple[str, int, bool, Any, Any, Any, tuple[float, str | None, str]]]:
    """Each phase's program in the order they run.

    ``(name, peak bytes, refused, estimated seconds, point estimate, measured
    run, how it compiled)``; the decode's estimate is every step of a
    completion; how it compiled is ``(seconds, cached, where)``.
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
    compiled = [(x.compile_seconds, x.cached, x.compiled_in) for x in (prefill, step)]
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
        how = report.compilation
        compiled.append((how.seconds, how.cached, report.compiled_in))
    return [
        (*found, run, how) for found, run, how in zip(out, runs, compiled, strict=True)
    ]


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
            "Offloaded as tunix's offload_to_cpu does: each model's variables "
            "(nnx.variables(model); rl/rl_cluster.py, _put_model_on_memory_kind) "
            "wait in host memory while it is idle, moved out and back in around "
            f"its idle phases: {moved:,} bytes per device per step over the host "
            f"link{how}. Each trainer's optimizer state stays on the device."
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
