"""Reinforcement learning on LLMs: the programs of one GRPO step, as tunix runs them.

A GRPO step (Shao et al. 2024, DeepSeekMath) differentiates the policy's
clipped, advantage-weighted log-probability ratio on sampled completions, with
a KL penalty towards a frozen reference model. Modules: ``loss`` (the loss of
google-tunix's GRPO learner under its default configuration, usable as the
``loss=`` of :func:`~nnx_introspect.step_memory_report`, and the per-token
log-probabilities it is built on), ``report`` (:class:`RLMemoryReport`: the
phases of one step, what each role keeps resident, the peak) and ``api``
(:func:`~nnx_introspect.rl_memory_report`: the step's programs compiled
through the step's and serving's own pipelines, then added up) and ``search``
(:func:`~nnx_introspect.rl_max_batch`: the most prompts per step that fit),
``layout`` (each role's devices: one mesh, or slices of their own) and
``layouts`` (:func:`~nnx_introspect.compare_rl_layouts`: which layout is
fastest).
"""
