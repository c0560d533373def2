"""A directory removed while a non-checkpoint is searched for checkpoints below.

The "not a checkpoint" error lists the checkpoints one or two levels below the
path; a directory there that another process removes meanwhile (a shared
``/tmp``) is passed over, and the error stays the one naming ``path``.
"""

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from nnx_introspect import ArgumentError
from nnx_introspect._checkpoint.files import resolve_checkpoint


def test_a_directory_removed_while_listed_keeps_the_error(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "7" / "default").mkdir(parents=True)
    (tmp_path / "7" / "default" / "_METADATA").write_text("{}")
    real = pathlib.Path.glob

    def glob(self: pathlib.Path, pattern: str) -> Iterator[Any]:
        if pattern == "*/_METADATA":  # its directory vanished mid-listing
            raise FileNotFoundError(2, "No such file or directory", str(self / "x"))
        return real(self, pattern)

    monkeypatch.setattr(pathlib.Path, "glob", glob)
    with pytest.raises(ArgumentError, match="7/default") as error:
        resolve_checkpoint(tmp_path)
    assert error.value.argument == "path"
