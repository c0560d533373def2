"""The ``nnx-introspect`` command line: argument parsing and rendering only.

One module per subcommand (:mod:`.summary`, :mod:`.mesh`, :mod:`.diff`,
:mod:`.checkpoint`, :mod:`.step`), each with an ``_add_<name>_parser(subparsers)``
function that declares its arguments (with :func:`.args._add_output_args` for
``--format``/``--debug`` and :func:`.args._add_target_args` for
``TARGET``/``--seed``) and sets its handler ``_run_<name>(args) -> int`` with
``parser.set_defaults(handler=...)``; a new subcommand adds one module and one line
to :func:`.parser._build_parser`. Targets are resolved by :mod:`.._targets`; a
target error prints one line on stderr and exits with code 2 (``--debug`` adds the
traceback).

Two modules serve the handlers: :mod:`.errors` turns a library's bad argument
into the usage error naming its flag (one table, no reading of messages), and
:mod:`.progress` draws ``step``'s progress line on a terminal.

Startup is cheap: JAX, flax, orbax and rich are imported inside the handlers,
never at module level, so ``--help`` and argument errors do not wait for them.
Every argument converter is pure Python for the same reason.
"""

from nnx_introspect.cli.args import FORMATS as FORMATS
from nnx_introspect.cli.args import PROG as PROG
from nnx_introspect.cli.entry import main as main
from nnx_introspect.cli.errors import UsageError as UsageError
from nnx_introspect.cli.parser import Handler as Handler
from nnx_introspect.cli.plan_args import OPTIMIZERS as OPTIMIZERS
from nnx_introspect.cli.plan_args import bytes_arg as bytes_arg
from nnx_introspect.cli.plan_args import mesh_arg as mesh_arg
from nnx_introspect.cli.step import batch_arg as batch_arg

__all__ = [
    "main",
]
