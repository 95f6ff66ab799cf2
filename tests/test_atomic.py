"""advisor.run_dir.atomic: files appear whole or not at all, with ordinary permissions, and no litter."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from advisor.run_dir.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic


def test_writes_and_replaces(tmp_path):
    target = tmp_path / "report.json"
    write_json_atomic(target, {"a": np.float64(1.5), "n": np.int64(3), "p": Path("x/y")})
    assert target.read_text() == '{\n  "a": 1.5,\n  "n": 3,\n  "p": "x/y"\n}\n'
    inode = target.stat().st_ino
    write_text_atomic(str(target), "second\n")  # str paths too
    assert target.read_text() == "second\n"
    assert target.stat().st_ino != inode  # renamed over, not rewritten in place: a reader keeps the old file
    assert os.listdir(tmp_path) == ["report.json"]


def test_unserialisable_object_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "compare.json"
    target.write_text("old")
    with pytest.raises(TypeError, match="not JSON serialisable: object"):
        write_json_atomic(target, {"x": object()})
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["compare.json"]


def test_a_failed_write_removes_its_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "samples.csv"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_bytes_atomic(target, b"new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["samples.csv"]


def test_text_that_cannot_be_encoded_writes_nothing(tmp_path):
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(tmp_path / "x.txt", "lone surrogate \udc80")
    assert os.listdir(tmp_path) == []


def test_permissions_follow_the_umask_not_the_temp_file(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "report.html", "<html>")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o640


def test_a_symlink_is_replaced_not_followed(tmp_path):
    """A link planted under a name advise writes must not make it overwrite the link's target."""
    real = tmp_path / "real.xml"
    real.write_text("old")
    link = tmp_path / "junit.xml"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert not link.is_symlink() and link.read_text() == "new" and real.read_text() == "old"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_name_taken_by_a_fifo_or_folder_is_refused(tmp_path, kind):
    """A FIFO would block the write forever; a folder cannot be renamed over: both are NotAFile."""
    from advisor.run_dir.atomic import NotAFile

    taken = tmp_path / "report.json"
    os.mkfifo(taken) if kind == "fifo" else taken.mkdir()
    with pytest.raises(NotAFile) as caught:
        write_text_atomic(taken, "{}")
    assert caught.value.filename == str(taken)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_missing_folder_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "no" / "such" / "file.json", "{}")


def test_json_round_trip_and_no_indent(tmp_path):
    write_json_atomic(tmp_path / "a.json", [1, 2], indent=None)
    assert (tmp_path / "a.json").read_text() == "[1, 2]\n" and json.loads((tmp_path / "a.json").read_text()) == [1, 2]
