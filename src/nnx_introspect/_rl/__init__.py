"""Reinforcement learning on LLMs: one GRPO or PPO step's programs, as tunix runs them.

A GRPO step (Shao et al. 2024, DeepSeekMath) differentiates the policy's
clipped, advantage-weighted log-probability ratio on sampled completions, with
a KL penalty towards a frozen reference model; a PPO step trains a critic
beside the policy. Modules: ``loss`` (the loss of google-tunix's GRPO learner
under its default configuration, usable as the ``loss=`` of
:func:`~nnx_introspect.step_memory_report`, and the per-token
log-probabilities it is built on), ``ppo`` (tunix's PPO policy and value
losses), ``report`` (:class:`RLMemoryReport`: the phases of one step, what
each role keeps resident, the peak), ``spec``
(:class:`~nnx_introspect.RLSpec`: the request, checked once), ``api``
(:func:`~nnx_introspect.rl_memory_report`, its face, and
:func:`~nnx_introspect.measure_rl`: spec, plan, programs, report),
``programs`` (the plan: each phase's program, then each compiled or recalled
through the step's and serving's own pipelines),
``assemble`` (the roles resident and each phase's peak from them),
``choices`` (what google-tunix 0.1.7 does where a request may choose
otherwise, with its lines, and the report's words for each), ``search``
(:func:`~nnx_introspect.rl_max_batch`: the most prompts per step that fit),
``layout`` (each role's devices: one mesh, or slices of their own) and
``layouts`` (:func:`~nnx_introspect.compare_rl_layouts`: which layout is
fastest).
"""
