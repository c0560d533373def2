"""Installs ``benchmarks/timecal_hook.py`` in the child processes of ``timecal.py``.

``timecal.py`` puts this folder on ``PYTHONPATH`` (a deviceless compile runs
in a child process that inherits it); the hook is installed only when
``TIMECAL_HLO_DIR`` is set, so any other Python started with it is untouched.
"""

import os

if os.environ.get("TIMECAL_HLO_DIR"):
    try:
        from benchmarks.timecal_hook import install

        install()
    except Exception as error:  # never keep the child from starting
        import sys

        print(f"timecal sitecustomize: hook not installed: {error!r}", file=sys.stderr)
