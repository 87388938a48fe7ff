"""The shared file helpers (evolver/files.py): content hashes of files and folders, the
empty-folder check, atomic writes, JSONL reading."""
import hashlib
import os

import pytest

from evolver.errors import UserError
from evolver.files import atomic_write, file_sha256, is_empty_or_missing, iter_jsonl, sha256_path, tree_sha256


def test_a_file_hashes_to_the_sha256_of_its_bytes(tmp_path):
    data = os.urandom(3 * 2**20 + 17)  # more than one read block
    (tmp_path / "f.bin").write_bytes(data)
    assert file_sha256(tmp_path / "f.bin") == sha256_path(tmp_path / "f.bin") == hashlib.sha256(data).hexdigest()


def test_a_folder_hashes_its_sorted_relative_paths_and_file_hashes_and_skips_links(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.txt").write_text("x")
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "link").symlink_to(tmp_path / "a.txt")
    lines = f"a.txt\0{hashlib.sha256(b'a').hexdigest()}\nb/x.txt\0{hashlib.sha256(b'x').hexdigest()}\n"
    assert tree_sha256(tmp_path) == sha256_path(tmp_path) == hashlib.sha256(lines.encode()).hexdigest()
    (tmp_path / "b" / "x.txt").write_text("y")
    assert tree_sha256(tmp_path) != hashlib.sha256(lines.encode()).hexdigest()


def test_only_nothing_or_an_empty_folder_counts_as_empty(tmp_path):
    assert is_empty_or_missing(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    assert is_empty_or_missing(tmp_path / "empty")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("")
    assert not is_empty_or_missing(tmp_path / "full")
    (tmp_path / "file").write_text("")
    assert not is_empty_or_missing(tmp_path / "file")
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    assert not is_empty_or_missing(tmp_path / "link")


def test_an_atomic_write_leaves_the_new_bytes_and_no_temp_file(tmp_path):
    target = tmp_path / "sub" / "out.json"
    atomic_write(target, "old\n")
    atomic_write(target, "néw\n")
    assert target.read_bytes() == "néw\n".encode()
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_jsonl_lines_come_with_their_numbers_and_bad_input_is_one_sentence(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"a": 1}\n\n{"b": "\u2028"}\n{"c":\n')
    lines = iter_jsonl(path, "memory")
    assert next(lines) == (1, {"a": 1})
    assert next(lines) == (3, {"b": "\u2028"})  # a line separator inside a string ends no line
    with pytest.raises(UserError, match=r"m.jsonl:4: not JSON \(Expecting value\)"):
        next(lines)
    with pytest.raises(UserError, match="absent.jsonl: no such memory file"):
        list(iter_jsonl(tmp_path / "absent.jsonl", "memory"))
    with pytest.raises(UserError, match="not a memory JSONL file"):
        list(iter_jsonl(tmp_path, "memory"))
