"""Every quoted output block of the README and the docs is its command's output now.

Each block sits between ``<!-- output ... -->`` and ``<!-- /output -->``, the
opening marker naming the command (``tests/docs_blocks.py`` says how to read
one). The cheap blocks (an abstract model, the CPU, seconds) are re-run
here and compared with the page; the slow ones (7B compiles for a named GPU
topology, 40 s to 10 min each) run with ``NNX_INTROSPECT_DOCS_SLOW=1``, the
ones measured on a chip with ``NNX_INTROSPECT_DOCS_CHIP=1`` on that chip.
``python benchmarks/docs/regen_docs.py`` rewrites the blocks that drifted.
"""

import os
from pathlib import Path
from typing import Any

import pytest

from tests import docs_blocks as regen

ROOT = Path(__file__).resolve().parents[1]

BLOCKS: list[Any] = regen.collect()
OPT_IN = {
    "slow": (
        "NNX_INTROSPECT_DOCS_SLOW",
        "compiles for a named GPU or TPU topology (40 s to 10 min)",
    ),
    "chip": ("NNX_INTROSPECT_DOCS_CHIP", "measures on the accelerator it names"),
}
_RESULTS: dict[Any, Any] = {}


def _param(block: Any) -> Any:
    marks = []
    if block.cost in OPT_IN:
        variable, why = OPT_IN[block.cost]
        marks.append(
            pytest.mark.skipif(
                os.environ.get(variable) != "1",
                reason=f"{block.name} {why}: set {variable}=1 to compare it, or run "
                f"`python benchmarks/docs/regen_docs.py --{block.cost} --check --only "
                f"{block.name}`",
            )
        )
    return pytest.param(block, id=block.name, marks=marks)


def _result(block: Any) -> Any:
    """``block``'s command's result, run once for the blocks that share it."""
    run = regen.run_of(block)
    if run not in _RESULTS:
        _RESULTS[run] = regen.execute(run)
    return _RESULTS[run]


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_quoted_output_is_the_commands_output_now(block: Any) -> None:
    found = regen.problems(block, _result(block))
    assert not found, (
        f"{block.name} ({regen.describe(regen.run_of(block))}): "
        + "\n".join(found)
        + f"\nRegenerate it: python benchmarks/docs/regen_docs.py"
        f"{'' if block.cost == 'cheap' else ' --' + block.cost} --only {block.name}"
    )


def test_the_docs_have_blocks_of_each_cost_and_every_marker_reads() -> None:
    costs = {block.cost for block in BLOCKS}
    assert costs == {"cheap", "slow", "chip"}
    files = {block.path.relative_to(ROOT).as_posix() for block in BLOCKS}
    assert {"README.md", "docs/howto/why-doesnt-my-step-fit.md"} <= files
    for block in BLOCKS:
        regen.run_of(block)  # every command or code resolves
        assert regen.shown(block), block.name  # and the block is of its kind
        if block.cost == "cheap":  # CI runs these: no compile for a topology
            assert "--topology" not in block.keys.get("command", ""), block.name
            assert "python" not in block.keys, block.name


PAGE = """\
Some prose.

<!-- output
command: nnx-introspect mesh pkg.mod:make
  --mesh tp=2 --format markdown
keep: ^(\\||- Compiled)
as: quote
exit: 1
-->

> | peak | 47.28 GiB |
> - Compiled in a child process (h100-8), 32.3 s; step: train.

<!-- /output -->

More prose.
"""


def _fake(stdout: str, code: int = 1) -> Any:
    return regen.Result(stdout=stdout, stderr="", code=code, seconds=1.0)


def test_a_block_drifts_when_a_figure_or_word_changes_not_a_compile_time(
    tmp_path: Path,
) -> None:
    (block,) = regen.parse_blocks(tmp_path / "page.md", PAGE)
    assert block.keys["command"] == (
        "nnx-introspect mesh pkg.mod:make --mesh tp=2 --format markdown"
    )
    same = "**t**\n| peak | 47.28 GiB |\n- Compiled in a child process (h100-8), 9.9 s; step: train.\n"
    assert regen.problems(block, _fake(same)) == []
    # The table wrapped or padded otherwise is the same output.
    assert regen.problems(block, _fake(same.replace("| peak |", "|  peak  |"))) == []
    for drifted in (
        same.replace("47.28", "47.29"),  # a figure
        same.replace("train", "training"),  # a word
        same.replace("- Compiled", "- Compiled\n| budget | 59.33 GiB |\n- Compiled"),
    ):
        (found,) = regen.problems(block, _fake(drifted))
        assert found.startswith("the quoted output drifted")
    (found,) = regen.problems(block, _fake(same, code=0))
    assert found.startswith("exit code 0, the marker says 1")


def test_an_estimate_in_ms_is_never_masked() -> None:
    one = regen.normalize(["- Step time, estimated from the compiled program: 234 ms."])
    two = regen.normalize(["- Step time, estimated from the compiled program: 235 ms."])
    assert one != two
    # The compile's own time is masked, in every sentence that reports one.
    for a, b in (
        ("8 compiles in 479 s on a pool.", "8 compiles in 503 s on a pool."),
        (
            "9 compile(s) of the step (x; y) in 353.8 s on",
            "9 compile(s) of the step (x; y) in 12.0 s on",
        ),
        (
            "Compiled in a child process (h100-8) by XLA:GPU (jaxlib 0.10.2): prefill 15.3 s, decode 17.8 s.",
            "Compiled in a child process (h100-8) by XLA:GPU (jaxlib 0.10.2): prefill 1.3 s, decode 7.8 s.",
        ),
    ):
        assert regen.normalize([a]) == regen.normalize([b])


def test_rewriting_writes_the_fresh_output_the_comparison_then_accepts(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    (block,) = regen.parse_blocks(page)
    fresh = _fake("**t**\n| peak | 50 GiB |\n| budget | 59 GiB |\n- other\n")
    assert regen.rewrite(page, [block], {block: fresh})
    text = page.read_text()
    assert "> | peak | 50 GiB |\n> | budget | 59 GiB |\n" in text
    assert "- other" not in text  # `keep` selects what the block quotes
    assert text.startswith("Some prose.") and text.endswith("More prose.\n")
    (again,) = regen.parse_blocks(page)
    assert regen.problems(again, fresh) == []
    assert not regen.rewrite(page, [again], {again: fresh})  # nothing left to change


def test_a_console_block_keeps_its_command_lines(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- output\ncommand: nnx-introspect summary\nas: console\nexit: 1\n"
        "echo-exit: yes\nstream: stderr\n-->\n\n```console\n$ nnx-introspect \\\n"
        "    summary > out.json\nold\n$ echo $?\n1\n```\n\n<!-- /output -->\n"
    )
    (block,) = regen.parse_blocks(page)
    assert regen.shown(block) == ["old"]
    fresh = regen.Result(stdout="{}", stderr="new\n", code=1, seconds=1.0)
    regen.rewrite(page, [block], {block: fresh})
    assert (
        "```console\n$ nnx-introspect \\\n    summary > out.json\nnew\n$ echo $?\n1\n```"
        in page.read_text()
    )


@pytest.mark.parametrize(
    ("marker", "match"),
    [
        ("command: nnx-introspect summary\nsize: 3\n", "is not one of the keys"),
        ("as: quote\n", "give one of 'command' and 'python'"),
        ("command: ls -l\n", "runs nnx-introspect or python"),
        ("command: nnx-introspect summary > x.txt\n", "without a shell"),
        ("command: nnx-introspect summary\ncost: free\n", "'cost' must be one of"),
        ("command: nnx-introspect summary\nhead: two\n", "'head' must be a whole"),
    ],
)
def test_a_bad_marker_names_its_line(marker: str, match: str, tmp_path: Path) -> None:
    text = f"x\n<!-- output\n{marker}-->\n\n> y\n\n<!-- /output -->\n"
    with pytest.raises(regen.MarkerError, match=match) as caught:
        regen.parse_blocks(tmp_path / "page.md", text)
    assert "page.md:2" in str(caught.value)


def test_a_marker_without_its_end_is_refused(tmp_path: Path) -> None:
    text = "<!-- output\ncommand: nnx-introspect summary\n-->\n\n> y\n"
    with pytest.raises(regen.MarkerError, match="no '<!-- /output -->'"):
        regen.parse_blocks(tmp_path / "page.md", text)


def test_a_page_edited_while_the_commands_ran_keeps_its_edits(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE + "\n" + PAGE)  # two identical markers
    first, second = regen.parse_blocks(page)
    assert (first.nth, second.nth) == (0, 1)
    page.write_text("A new first paragraph.\n\n" + page.read_text())
    fresh = _fake("| peak | 50 GiB |\n")
    assert regen.rewrite(page, [second], {second: fresh})
    text = page.read_text()
    assert text.startswith("A new first paragraph.")
    assert text.count("> | peak | 47.28 GiB |") == 1  # the first block untouched
    assert text.index("47.28 GiB") < text.index("> | peak | 50 GiB |")


def test_spans_keep_wrapped_sentences_whole_and_progress_is_never_quoted(
    tmp_path: Path,
) -> None:
    text = (
        "<!-- output\ncommand: nnx-introspect step t:f\n"
        "spans: ^Fits in .. HBM3\\)$ ;; ^Loss: .. \\.$\ngaps: ...\n-->\n\n"
        "```text\nold\n```\n\n<!-- /output -->\n"
    )
    (block,) = regen.parse_blocks(tmp_path / "page.md", text)
    out = "Fits in 1 GiB (a\nwrapped) on H100 HBM3)\n| table |\nLoss: lm, a\nwrapped one.\nMore.\n"
    assert regen.select(block, _fake(out, 0)) == [
        "Fits in 1 GiB (a",
        "wrapped) on H100 HBM3)",
        "...",
        "Loss: lm, a",
        "wrapped one.",
    ]
    (err,) = regen.parse_blocks(
        tmp_path / "page.md",
        "<!-- output\ncommand: nnx-introspect step t:f\nstream: stderr\n-->\n\n"
        "```text\nold\n```\n\n<!-- /output -->\n",
    )
    progress = (
        "nnx-introspect: Compiling the step of t:f with XLA for h100-8... (1m 15s)\n"
        "nnx-introspect: Compiling the step of t:f with XLA for h100-8... done (2m 22s)\n"
        "nnx-introspect: Does not fit: needs 2 GiB.\n"
    )
    result = regen.Result(stdout="", stderr=progress, code=1, seconds=1.0)
    assert regen.select(err, result) == ["nnx-introspect: Does not fit: needs 2 GiB."]
