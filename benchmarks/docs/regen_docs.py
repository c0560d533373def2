"""Re-run the command behind every quoted output block of the docs, and rewrite it.

Each quoted output in ``README.md`` and ``docs/**/*.md`` sits between
``<!-- output ... -->`` (the command that printed it, and which of its lines
the block quotes) and ``<!-- /output -->``; the markers' grammar, the runs and
the comparison are ``tests/docs_blocks.py``'s (the test suite's own reader of
the blocks), which this command line drives.

Usage, from the repository's root::

    python benchmarks/docs/regen_docs.py          # rewrite the cheap blocks
    python benchmarks/docs/regen_docs.py --slow --jobs 2   # and the slow ones
    python benchmarks/docs/regen_docs.py --check  # compare only; exit 1 on drift
    python benchmarks/docs/regen_docs.py --list   # every block, its cost, command
    python benchmarks/docs/regen_docs.py --slow --only serve.md   # a subset
    python benchmarks/docs/regen_docs.py --chip   # on the chip the blocks name

The slow blocks are 7B steps compiled for 8 to 256 H100s (deviceless, with the
``gpu`` extra): about 40 s to 8 min each on an idle 2-core CPU, 17 commands,
most of an hour in all; ``--jobs 2`` runs two at once (each also starts its
own child processes). ``--chip`` runs the ``--measure`` blocks, which only the
chip they were measured on can regenerate.

It prints each command's wall time, for the prose that quotes it.
``tests/test_docs_blocks.py`` runs the cheap blocks in the test suite and the
slow ones with ``NNX_INTROSPECT_DOCS_SLOW=1``.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: `tests` importable
    sys.path.insert(0, str(ROOT))

from tests.docs_blocks import (  # noqa: E402
    Block,
    Result,
    collect,
    describe,
    doc_files,
    execute_all,
    problems,
    rewrite,
    run_of,
    select,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate (or ``--check``) the chosen blocks; 1 when any drifted or failed."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/docs/regen_docs.py",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
    )
    parser.add_argument("files", nargs="*", type=Path, help="default: README and docs")
    parser.add_argument("--slow", action="store_true", help="also the slow blocks")
    parser.add_argument("--chip", action="store_true", help="also the chip blocks")
    parser.add_argument("--all", action="store_true", help="every block")
    parser.add_argument(
        "--only",
        action="append",
        help="blocks whose file:line or command has this (repeatable)",
    )
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--list", action="store_true", help="list the blocks, run none")
    parser.add_argument("--jobs", type=int, default=1, help="commands run at once")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.files] or doc_files()
    costs = {"cheap"} | ({"slow"} if args.slow or args.all else set())
    costs |= {"chip"} if args.chip or args.all else set()
    blocks = [b for b in collect(paths) if args.list or b.cost in costs]
    if args.only:
        blocks = [
            b
            for b in blocks
            if any(o in b.name or o in describe(run_of(b)) for o in args.only)
        ]
    if args.list:
        for block in blocks:
            print(f"{block.cost:5}  {block.name:45}  {describe(run_of(block))}")
        return 0
    runs = {block: run_of(block) for block in blocks}
    print(
        f"{len(blocks)} block(s), {len(set(runs.values()))} command(s)", file=sys.stderr
    )
    done = execute_all(runs.values(), args.jobs)
    results = {block: done[run] for block, run in runs.items()}
    drifted = refused = 0
    for block in blocks:
        found = problems(block, results[block])
        if not _ran_as_marked(block, results[block]):
            refused += 1
            print(f"{block.name}: " + "\n".join(found[:2]), file=sys.stderr)
        elif found and args.check:
            drifted += 1
            print(f"{block.name}: " + "\n".join(found), file=sys.stderr)
    if args.check:
        return 1 if drifted or refused else 0
    for path in paths:
        own = [b for b in blocks if b.path == path]
        good = {b: results[b] for b in own if _ran_as_marked(b, results[b])}
        if rewrite(path, own, good):
            print(f"rewrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 1 if refused else 0


def _ran_as_marked(block: Block, result: Result) -> bool:
    """Whether ``result`` has the marker's exit code and the lines it selects."""
    return result.code == int(block.keys.get("exit", "0")) and bool(
        select(block, result)
    )


if __name__ == "__main__":
    sys.exit(main())
