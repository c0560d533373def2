"""``benchmarks/README.md`` lists every script of ``benchmarks/``, by its path there.

A script added without its line in the README fails here; so does a README
line naming a script that is gone, and a script left at the folder's top
instead of in one of its four folders.
"""

import re
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
FOLDERS = ("speed", "calibration", "docs", "outside")
NAMED = re.compile(r"`((?:" + "|".join(FOLDERS) + r")/[\w/]+\.(?:py|sh))`")


def _scripts() -> list[str]:
    """Every ``.py`` and ``.sh`` file under ``benchmarks/``, relative to it."""
    return sorted(
        path.relative_to(BENCHMARKS).as_posix()
        for path in BENCHMARKS.rglob("*")
        if path.suffix in (".py", ".sh")
        and not any(part.startswith((".", "__")) for part in path.parts)
    )


def test_every_script_is_named_in_the_readme() -> None:
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    scripts = _scripts()
    assert len(scripts) > 20  # the walk found the folders
    missing = [s for s in scripts if f"`{s}`" not in readme]
    assert not missing, f"benchmarks/README.md does not name {missing}"


def test_every_script_the_readme_names_exists() -> None:
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    named = set(NAMED.findall(readme))
    assert named, "the README names no script by its folder"
    assert not named - set(_scripts())


def test_every_script_sits_in_one_of_the_four_folders() -> None:
    assert {s.split("/")[0] for s in _scripts()} <= set(FOLDERS)
