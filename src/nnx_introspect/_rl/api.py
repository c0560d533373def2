"""The public :func:`rl_memory_report`: an :class:`RLSpec`, planned, compiled.

:func:`measure_rl` measures a spec (the search calls it with each spec it
tries), one stage after another, as a training step's and serving's:
the request checked where it is built (:mod:`~nnx_introspect._rl.spec`), its
programs planned and compiled or recalled through the step's and serving's
own pipelines (:mod:`~nnx_introspect._rl.programs`), the report assembled
from what they read (:mod:`~nnx_introspect._rl.assemble`).
"""

from typing import Any

from nnx_introspect._rl.assemble import assemble
from nnx_introspect._rl.programs import compile_programs, plan_rl
from nnx_introspect._rl.report import RLMemoryReport
from nnx_introspect._rl.spec import RLSpec
from nnx_introspect._step import built_once
from nnx_introspect._typing import typechecked
from nnx_introspect._xla import start_backends_quietly

__all__ = ["measure_rl", "rl_memory_report"]


@typechecked
def rl_memory_report(
    actor: Any,
    mesh: Any,
    /,
    *,
    batch: Any,
    generations: Any,
    prompt: Any,
    completion: Any,
    reference: Any = True,
    lora: Any = None,
    critic: Any = None,
    optimizer: Any = "adamw",
    rollout_weights: Any = None,
    kv_cache: Any = None,
    donate: Any = "optimizer",
    role_meshes: Any = None,
    offload: Any = False,
    breakdown: Any = False,
    topology: Any = None,
    max_device_bytes: Any = None,
    init_cache: Any = None,
    decode: Any = None,
    cache: Any = True,
    measure: Any = None,
    compiler_flags: Any = None,
) -> RLMemoryReport:
    """Whether one GRPO step fits: its four programs compiled for the target.

    The programs of one step, each compiled through the library's own
    pipelines (no device needed for a named ``topology``), on one mesh every
    role shares (colocated, as tunix's ``RLCluster`` runs them on one mesh)
    unless ``role_meshes`` gives a role devices of its own:

    * **rollout**: the prefill of ``batch x generations`` prompts of
      ``prompt`` tokens into a KV cache of ``prompt + completion`` positions,
      and a decode step (:func:`~nnx_introspect.serve_memory_report`), on the
      actor's own parameters in their dtypes by default;
    * **reference**: the per-token log-probabilities of the ``prompt +
      completion`` tokens under the reference model (forward only; left out
      with ``reference=False``);
    * **train**: the actor's step on the GRPO loss
      (:func:`~nnx_introspect._rl.loss.grpo_loss`, tunix's own) with
      ``optimizer``, donating only the optimizer's state.

    Each phase's peak is its program's own plus what the other roles keep
    resident while it runs (the actor's parameters and optimizer state, the
    reference's parameters, a rollout copy of the weights when
    ``rollout_weights`` asks for one); the step's peak is the largest, against
    the budget a step gets. The sequences split over the mesh's
    data-parallel axes (every axis but ``tp``), the weights as their
    annotations say.

    The defaults are what google-tunix 0.1.7 does (see
    :mod:`~nnx_introspect._rl.choices`, which cites its lines): colocated,
    the rollout *is* the training actor (no copy), its KV cache in the
    model's dtype; each trainer donates only its optimizer; offloading moves
    each model's variables and never an optimizer's state. The report's
    notes say each choice, and which are not tunix's.

    Args:
        actor: The policy model (every argument is documented on
            :class:`~nnx_introspect.RLSpec`, the request they make).
        mesh: The mesh every role runs on, but those ``role_meshes`` places.
        batch: Prompts per step.
        generations: Completions per prompt (GRPO's group size).
        prompt: Tokens of each prompt.
        completion: Tokens of each completion.
        reference: Compute the reference model's log-probabilities.
        lora: Train LoRA adapters instead of every parameter.
        critic: A PPO step's critic instead of GRPO's groups.
        optimizer: The actor's optimizer (and the critic's).
        rollout_weights: The rollout's weights dtype (``None``: the actor's).
        kv_cache: The rollout's KV cache dtype (``None``: the model's).
        donate: What each training step donates.
        role_meshes: Roles on devices of their own.
        offload: Hold the models a phase does not run on in host memory.
        breakdown: Also classify every buffer live at each phase's peak.
        topology: A target such as ``"v5e-8"`` or ``"h100-8"``.
        max_device_bytes: A budget per device (``"16GiB"`` or bytes).
        init_cache: As for :func:`~nnx_introspect.serve_memory_report`.
        decode: As for :func:`~nnx_introspect.serve_memory_report`.
        cache: Read programs compiled before from the cache of compile results.
        measure: Run each phase's program on this process's devices.
        compiler_flags: XLA or libtpu flags every program is compiled with
            (as :func:`~nnx_introspect.step_memory_report`'s); the report
            lists them (:attr:`RLMemoryReport.compiler_flags
            <nnx_introspect._rl.report.RLMemoryReport.compiler_flags>`).

    Returns:
        The :class:`~nnx_introspect._rl.report.RLMemoryReport`.

    Raises:
        ArgumentError: A size not a positive integer (naming it), a
            ``topology`` or mesh that is not one, ``batch x generations``
            sequences that do not split over a mesh's data-parallel axes,
            or any argument its program's own report refuses, before that
            program compiles.

    Example:
        >>> from nnx_introspect import rl_memory_report
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> report = rl_memory_report(small, "data=2", batch=2, generations=2,
        ...                           prompt=8, completion=8,
        ...                           max_device_bytes="64MiB")
        >>> [p.name for p in report.phases], report.fits()
        (['prefill', 'decode', 'reference', 'train'], True)
        >>> report.peak_bytes == max(p.peak_bytes for p in report.phases)
        True
        >>> "rollout weights" in dict(report.roles)  # the rollout is the actor
        False
    """
    spec = RLSpec(
        actor,
        mesh,
        batch=batch,
        generations=generations,
        prompt=prompt,
        completion=completion,
        reference=reference,
        lora=lora,
        critic=critic,
        optimizer=optimizer,
        rollout_weights=rollout_weights,
        kv_cache=kv_cache,
        donate=donate,
        role_meshes=role_meshes,
        offload=offload,
        breakdown=breakdown,
        topology=topology,
        max_device_bytes=max_device_bytes,
        init_cache=init_cache,
        decode=decode,
        cache=cache,
        measure=measure,
        compiler_flags=compiler_flags,
    )
    return measure_rl(spec)


def measure_rl(spec: RLSpec) -> RLMemoryReport:
    """Plan, compile and report the RL step ``spec`` describes.

    What :func:`rl_memory_report` does once its arguments are a spec; the
    search (:func:`~nnx_introspect.rl_max_batch`) calls it with each spec it
    tries. One stage after another: the plan (the rollout's serving request
    and the learner programs, :func:`~nnx_introspect._rl.programs.plan_rl`),
    each program compiled or read from the cache of compile results and read
    (the rollout through :func:`~nnx_introspect._serve.measure_serve`, the
    others through :func:`~nnx_introspect._step.measure_step`, in the order a
    step runs them), then the report assembled
    (:func:`~nnx_introspect._rl.assemble.assemble`). The models the spec
    built for its checks are the programs' own (built once).

    Example:
        >>> from nnx_introspect import RLSpec, measure_rl, rl_memory_report
        >>> from nnx_introspect.examples import LlamaConfig, llama
        >>> small = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2,
        ...                           n_heads=2, d_ff=64))
        >>> sizes = dict(batch=2, generations=2, prompt=8, completion=8)
        >>> spec = RLSpec(small, "data=2", max_device_bytes="64MiB", **sizes)
        >>> report = measure_rl(spec)
        >>> [p.name for p in report.phases], report.fits()
        (['prefill', 'decode', 'reference', 'train'], True)
        >>> again = rl_memory_report(small, "data=2", max_device_bytes="64MiB",
        ...                          **sizes)
        >>> again.peak_bytes == report.peak_bytes
        True
    """
    if not isinstance(spec, RLSpec):
        raise TypeError(
            f"`spec` must be an RLSpec, got {type(spec).__name__}. Build one with "
            "RLSpec(actor, mesh, batch=..., ...) or call rl_memory_report(...) "
            "with the same arguments."
        )
    start_backends_quietly()  # before the programs' devices are counted
    with built_once(spec.built()):  # the actor is built once for every program
        plan = plan_rl(spec)
        programs = compile_programs(spec, plan)
        return assemble(spec, programs)
