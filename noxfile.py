"""Nox sessions: tests, typecheck, lint and docs. Plain ``nox`` runs all four.

Sessions run on the interpreter that runs nox (set ``NOX_PYTHON=3.12`` to pick
another of the versions ``pyproject.toml`` declares); dependencies come from its
dependency groups. Extra arguments after ``--`` reach the underlying tool
(``nox -s tests -- -k mesh``).
"""

import os

import nox

nox.needs_version = ">=2026.8.10"  # the first nox with --parallel
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "typecheck", "lint", "docs"]
# The sessions run side by side, one per CPU (`nox -j 1` runs them one at a
# time): the typecheck, lint and docs sessions (about two minutes between them,
# their installs included) finish while the tests run, which keep both cores
# of a 2-core machine busy only about nine tenths of the time. Each session's
# output is printed when it finishes; `nox -s tests` runs the tests alone.
nox.options.parallel = "auto"
nox.options.allow_parallel = True

PYPROJECT = nox.project.load_toml("pyproject.toml")
SUPPORTED = nox.project.python_versions(PYPROJECT)
PYTHON = os.environ.get("NOX_PYTHON") or None
if PYTHON is not None and PYTHON not in SUPPORTED:
    raise SystemExit(f"NOX_PYTHON={PYTHON} is not one of {SUPPORTED} (pyproject.toml)")
DEVICES = {
    "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    "JAX_PLATFORMS": "cpu",
    # Python writes and reads the package's bytecode even where the machine sets
    # PYTHONDONTWRITEBYTECODE (this project's CI image does): the package is
    # installed editable, so each of the ~200 processes a test run starts (child
    # compiles, CLI runs, pytest's workers) would compile its modules and the
    # tests' assertion rewrites again (14% of tests/test_cli.py's and
    # tests/test_serve_child.py's time). An empty value is "not set".
    "PYTHONDONTWRITEBYTECODE": "",
}


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite and the doctests of ``src`` on 8 virtual CPU devices."""
    # The tpu extra (libtpu) and the gpu extra (the CUDA plugin and ptxas) let
    # the step-memory tests compile with XLA:TPU and XLA:GPU, with no device.
    session.install(
        "-e", ".[tpu,gpu,cluster]", *nox.project.dependency_groups(PYPROJECT, "test")
    )
    # Three pytest workers (pytest-xdist): most step tests wait on a child
    # process's compile, so a third worker keeps both cores busy (on a 2-core
    # machine, a clean clone: 661 s of tests against 683 s with two);
    # PYTEST_WORKERS=0 runs in one process. pytest exits 5 when it collects
    # nothing; nox treats that as a failure.
    # `-m "not slow"`: the tests marked slow (heavy compiles whose claims
    # cheaper tests hold too; see pyproject.toml's markers) are left out. A
    # later -m wins: `nox -s tests -- -m slow` runs them alone, `-m ""` all.
    workers = os.environ.get("PYTEST_WORKERS", "3")
    session.run(
        "pytest",
        "-n",
        workers,
        "--dist",
        "loadscope",
        "-m",
        "not slow",
        *session.posargs,
        env=DEVICES,
    )


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """Run ``mypy --strict`` over ``src`` and ``tests``."""
    # the cluster extra: the tests import distributed (Dask) for the mesh sweep
    session.install(
        "-e", ".[cluster]", *nox.project.dependency_groups(PYPROJECT, "typecheck")
    )
    session.run("mypy", "--strict", *(session.posargs or ["src", "tests"]))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Run ``ruff check``, ``ruff format --check`` and ``lint-imports``."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    # lint-imports reads the package's source (it imports nothing of it), so the
    # package is installed without its dependencies.
    session.install("--no-deps", "-e", ".")
    session.run("ruff", "check", *session.posargs)
    session.run("ruff", "format", "--check", *session.posargs)
    session.run("lint-imports", "--no-logo")  # no 10-line banner in the log


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Sphinx HTML docs with ``-W`` and run their doctests."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "docs"))
    # -q: warnings and errors only (myst logs its whole parser config at each
    # start, the doctest builder a line per document). One doctree directory
    # for both builders: the doctest build reads the pages the HTML build parsed
    # (autodoc's imports, myst's parse) instead of reading them all again.
    doctrees = "docs/_build/doctrees"
    for builder, parallel in (("html", ["-j", "auto"]), ("doctest", [])):
        session.run(
            "sphinx-build",
            "-q",
            "-W",
            "--keep-going",
            *parallel,
            "-d",
            doctrees,
            "-b",
            builder,
            "docs",
            f"docs/_build/{builder}",
            *session.posargs,
            env=DEVICES,
        )
