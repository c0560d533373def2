"""rl_memory_report(breakdown=True): each phase's buffers, kinds named by role."""

from nnx_introspect import rl_memory_report
from nnx_introspect.examples import LlamaConfig, llama

SMALL = llama(LlamaConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, d_ff=64))


def test_each_phase_is_broken_down_with_its_roles_kinds() -> None:
    report = rl_memory_report(
        SMALL,
        "data=2",
        batch=2,
        generations=2,
        prompt=8,
        completion=8,
        breakdown=True,
        max_device_bytes="64MiB",
    )
    found = report.breakdowns
    assert sorted(found) == ["decode", "prefill", "reference", "train"]
    kinds = {
        name: {g.label: g.nbytes for g in b.by_kind()} for name, b in found.items()
    }
    # the reference's parameters are its own role; the actor's keep their name
    assert "reference" in kinds["reference"] and "parameter" not in kinds["reference"]
    assert "parameter" in kinds["train"] and "reference" not in kinds["train"]
    # colocated, the rollout serves the actor's own parameters: named as them
    actor = dict(report.roles)["actor parameters"]
    for phase in ("prefill", "decode"):
        assert "parameter" in kinds[phase] and "weights" not in kinds[phase]
        assert "rollout weights" not in kinds[phase]
        assert kinds[phase]["parameter"] >= actor
    # the programs' own breakdowns are untouched
    own = report.programs["reference"].breakdown
    assert "parameter" in {g.label for g in own.by_kind()}
    assert any(n.startswith("At train's peak") for n in report.table().notes)
