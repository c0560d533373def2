"""The fit search's ladders (issue 29, item 5) and its remat candidates (issue 28,
item 1): each candidate is tried under the policies, pruned where memory and
time are monotone, and the report quotes each candidate's evidence.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import nnx_introspect as ni
from nnx_introspect._sweep.fit import ladders
from nnx_introspect._sweep.fit.ladders import (
    Config,
    MicrobatchLadder,
    RematCandidate,
    RematLadder,
    dominates,
)

# 1 of llama_tiny_sharded's 8 layers: the remat candidates are given (patched
# below), so the same ladders, policies and pruning at about three quarters of
# the 2-layer compiles (the step as given: about 150 MiB, 4 microbatches fit)
TINY = "tests.llama_tiny_layers:llama_tiny_1_layer_sharded"
TOKENS = jax.ShapeDtypeStruct((32, 256), jnp.int32)
MESH = (("fsdp", 8), ("tp", 1))
POLICIES = ("dots_saveable", "dots_with_no_batch_dims_saveable", "nothing_saveable")
LADDERS = (
    RematLadder(
        [RematCandidate("A", 0, 2, ""), RematCandidate("B", 0, 4, "")], POLICIES
    ),
    MicrobatchLadder(),
)


def _c(remat: str = "", policy: str = "", k: int = 1, mesh: Any = MESH) -> Config:
    return Config(mesh, ((remat, policy),) if remat else (), k)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (_c(), _c("A", "dots_saveable"), True),  # no remat before any
        (_c("A", "dots_saveable"), _c("A", "nothing_saveable", 2), True),
        (_c("A", "nothing_saveable"), _c("A", "dots_saveable"), False),  # more saved
        (_c("A", "dots_saveable", 4), _c("A", "nothing_saveable", 2), False),  # more k
        (_c("A", "dots_saveable"), _c("B", "nothing_saveable"), False),  # unordered
        (_c("B", "nothing_saveable"), _c("A", "dots_saveable"), False),
        (_c(), _c(mesh=(("tp", 8),)), False),  # another mesh
        (_c("A", "dots_saveable"), _c("A", "dots_saveable"), False),  # itself
    ],
)
def test_dominance_is_no_further_along_every_ladder(
    a: Config, b: Config, expected: bool
) -> None:
    assert dominates(LADDERS, a, b) is expected


def test_the_remat_ladder_gives_every_candidate_every_policy() -> None:
    rungs = LADDERS[0].after(None, _c())
    assert [r for r, _ in rungs] == [
        ((name, p),)
        for name in ("A", "B")
        for p in (*POLICIES, "offload_dot_with_no_batch_dims")
    ]
    assert LADDERS[0].after(None, _c("A", "dots_saveable")) == []  # climbed once


@pytest.fixture(scope="module")
def two() -> ni.FitSearch:
    """A search given two candidates: the repeated layer and a child of it."""
    found = [
        RematCandidate("LlamaLayer", 3 << 20, 8, "LlamaLayer: 3 MiB kept under 8"),
        RematCandidate("RMSNorm", 1 << 20, 17, "RMSNorm: 1 MiB kept under 17"),
    ]
    patch = pytest.MonkeyPatch()
    patch.setattr(ladders, "remat_candidates", lambda breakdown, model: found)
    try:
        with ThreadPoolExecutor(2) as pool:
            return ni.fit_step(
                TINY,
                "fsdp=8,tp=1",
                (TOKENS,),
                loss="lm",
                optimizer="adamw",
                max_device_bytes="100MB",  # the step as given: about 150 MiB
                executor=pool,
            )
    finally:
        patch.undo()


def test_each_candidate_is_tried_under_the_policies(two: ni.FitSearch) -> None:
    for name in ("LlamaLayer", "RMSNorm"):
        rows = [r for r in two.rows if r.remat and r.remat[0][0] == name]
        policies = {r.remat[0][1] for r in rows if r.microbatches == 1}
        assert set(POLICIES) <= policies, (name, policies)
        for row in rows:  # compiled, or it says why not
            assert row.peak_bytes is not None or row.why, row


def test_a_rung_is_compiled_only_when_nothing_before_it_fits(two: ni.FitSearch) -> None:
    compiled = [r for r in two.rows if r.peak_bytes is not None]
    configs = {Config(r.mesh, r.remat, r.microbatches): r for r in compiled}
    two_ladders = (
        RematLadder(
            [
                RematCandidate("LlamaLayer", 0, 8, ""),
                RematCandidate("RMSNorm", 0, 17, ""),
            ],
            POLICIES,
        ),
        MicrobatchLadder(),
    )
    for config, row in configs.items():
        if config.microbatches == 1:
            continue  # the remat rungs compile side by side
        before = [
            other
            for other, r in configs.items()
            if r.status == "fits" and dominates(two_ladders, other, config)
        ]
        assert not before, (row, before)


def test_the_report_quotes_each_candidates_evidence(two: ni.FitSearch) -> None:
    assert two.candidates == (
        ("LlamaLayer", "LlamaLayer: 3 MiB kept under 8"),
        ("RMSNorm", "RMSNorm: 1 MiB kept under 17"),
    )
    notes = " ".join(two.table().notes)
    assert two.layer is not None
    # each basis names its class first, so the note names it once
    assert f"Remat: {dict(two.candidates)[two.layer]}." in notes
    other = "RMSNorm" if two.layer == "LlamaLayer" else "LlamaLayer"
    assert f"Also tried: {dict(two.candidates)[other]}." in notes
    assert f"{two.layer} ({two.layer}:" not in notes
    chosen = two.chosen
    assert chosen is not None
    if chosen.remat:
        assert two.layer == chosen.remat[0][0]
