# SPDX-License-Identifier: GPL-2.0-only
"""Output paths: refused before any work with one line naming the path and the reason,
accepted where a file can be written, and nothing made by a check."""

from __future__ import annotations

import os

import pytest

from emu import outpath
from emu.errors import UserError


def test_a_writable_place_is_accepted_and_nothing_is_created(tmp_path):
    new = tmp_path / "new.pcapng"
    assert outpath.check_file(new) == str(new)
    assert not new.exists()
    old = tmp_path / "old.svg"
    old.write_text("x")
    assert outpath.check_file(str(old)) == str(old)
    assert old.read_text() == "x"
    assert outpath.check_file(os.devnull) == os.devnull


def test_a_relative_path_is_checked_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert outpath.check_file("out.svg") == "out.svg"
    with pytest.raises(UserError, match=r"^cannot write sub/out\.svg: no directory .*/sub$"):
        outpath.check_file("sub/out.svg")


@pytest.mark.parametrize("make, rel, says", [
    (lambda t: None, "missing/x.pcapng", "no directory {t}/missing"),
    (lambda t: None, "a/b/x.pcapng", "no directory {t}/a/b"),
    (lambda t: (t / "ro").write_text(""), "ro/r.json", "{t}/ro is not a directory"),
    (lambda t: (t / "ro").write_text(""), "ro/a/r.json", "{t}/ro is not a directory"),
    (lambda t: (t / "d").mkdir(), "d", "it is a directory"),
])
def test_a_path_that_cannot_be_written_is_one_line_naming_it_and_why(tmp_path, make, rel,
                                                                     says):
    make(tmp_path)
    path = str(tmp_path / rel)
    with pytest.raises(UserError) as e:
        outpath.check_file(path)
    assert str(e.value) == f"cannot write {path}: {says.format(t=tmp_path)}"
    assert "\n" not in str(e.value)


def test_an_empty_path_is_refused():
    with pytest.raises(UserError, match="empty"):
        outpath.check_file("")
    with pytest.raises(UserError, match="empty"):
        outpath.make_dir("")


@pytest.mark.parametrize("flags, says", [(0, "permission denied"),
                                          (os.ST_RDONLY, "read-only file system")])
def test_a_directory_we_may_not_write_in_is_said(tmp_path, monkeypatch, flags, says):
    """Simulated (root may write anywhere, and a read-only mount needs one): what the
    system answers for ``tmp_path`` is what the line says."""
    class Vfs:
        f_flag = flags

    monkeypatch.setattr(os, "access", lambda p, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda p: Vfs)
    with pytest.raises(UserError) as e:
        outpath.check_file(tmp_path / "x")
    assert str(e.value) == f"cannot write {tmp_path}/x: {says} ({tmp_path})"
    (tmp_path / "old").write_text("")
    with pytest.raises(UserError, match=f"^cannot write {tmp_path}/old: {says}"):
        outpath.check_file(tmp_path / "old")
    with pytest.raises(UserError, match=f"^cannot create directory {tmp_path}/d: {says}"):
        outpath.make_dir(tmp_path / "d")


def test_make_dir_makes_missing_parents_like_mkdir_p(tmp_path):
    d = tmp_path / "a" / "b"
    assert outpath.make_dir(d) == str(d)
    assert d.is_dir()
    assert outpath.make_dir(d) == str(d)  # already there: fine


def test_make_dir_under_a_file_is_one_line_and_makes_nothing(tmp_path):
    (tmp_path / "ro").write_text("")
    for rel in ("ro", "ro/io", "ro/a/io"):
        path = str(tmp_path / rel)
        with pytest.raises(UserError) as e:
            outpath.make_dir(path)
        assert str(e.value) == f"cannot create directory {path}: {tmp_path}/ro is not a directory"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


def test_cannot_write_says_an_os_errors_reason_not_its_repr(tmp_path):
    e = OSError(28, "No space left on device")
    assert outpath.cannot_write("/x/y", e) == "cannot write /x/y: No space left on device"
    assert outpath.cannot_write(tmp_path, "why") == f"cannot write {tmp_path}: why"


def test_made_dir_is_undone_when_the_checks_after_it_refuse(tmp_path):
    (tmp_path / "logs").mkdir()
    d = tmp_path / "logs" / "a" / "b"
    with pytest.raises(UserError, match="refused"), outpath.made_dir(d) as made:
        assert made == str(d) and d.is_dir()
        raise UserError("refused")
    assert list(tmp_path.iterdir()) == [tmp_path / "logs"]  # what was there stays
    assert list((tmp_path / "logs").iterdir()) == []
    with outpath.made_dir(d):
        pass
    assert d.is_dir()  # kept when nothing refused


def test_made_dir_keeps_a_directory_something_was_written_in(tmp_path):
    d = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), outpath.made_dir(d):
        (tmp_path / "a" / "note").write_text("")
        raise RuntimeError
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["note"]
