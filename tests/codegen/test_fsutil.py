"""codegen.fsutil: atomic publication."""

from __future__ import annotations

import os
import stat

import pytest

from codegen.fsutil import atomic_write, current_umask, remove_temp_files, temp_prefix, write_if_changed


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_umask_mode_not_mkstemps(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        assert current_umask() == umask
        atomic_write(tmp_path / "f.bin", b"x")
        write_if_changed(tmp_path / "g.bin", b"y")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.bin").stat().st_mode) == mode
    assert stat.S_IMODE((tmp_path / "g.bin").stat().st_mode) == mode


def test_write_if_changed_keeps_an_unchanged_file(tmp_path):
    path = tmp_path / "f"
    assert write_if_changed(path, b"a") and not write_if_changed(path, b"a")
    assert write_if_changed(path, b"b") and path.read_bytes() == b"b"


def test_temp_files_of_a_dead_writer_are_removable_by_pid(tmp_path):
    mine = tmp_path / (temp_prefix(tmp_path / "x.cubin", pid=4242) + "abcdefgh.tmp")
    other = tmp_path / (temp_prefix(tmp_path / "x.cubin", pid=4243) + "abcdefgh.tmp")
    mine.write_bytes(b"half")
    other.write_bytes(b"half")
    assert remove_temp_files(tmp_path, [4242]) == [mine]
    assert other.exists() and not mine.exists()


def test_path_arg_refuses_an_empty_path_and_keeps_the_others():
    import argparse
    from pathlib import Path

    from codegen.fsutil import path_arg

    with pytest.raises(argparse.ArgumentTypeError, match="got an empty path; accepted: a non-empty path"):
        path_arg("")
    assert path_arg(".") == Path(".") and path_arg("out dir") == Path("out dir")
