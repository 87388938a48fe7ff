"""The shared file helpers (base/files.py): content hashes of files and folders, the
empty-folder check, atomic writes, JSONL reading."""
import hashlib
import os

import pytest

from base.errors import UserError
from base.files import atomic_write, is_empty_or_missing, iter_jsonl, sha256_file, sha256_files, sha256_path, sha256_tree


def test_a_file_hashes_to_the_sha256_of_its_bytes(tmp_path):
    data = os.urandom(3 * 2**20 + 17)  # more than one read block
    (tmp_path / "f.bin").write_bytes(data)
    assert sha256_file(tmp_path / "f.bin") == sha256_path(tmp_path / "f.bin") == hashlib.sha256(data).hexdigest()


def test_a_folder_hashes_its_relative_paths_and_file_hashes_in_component_order_and_skips_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "c").write_text("c")
    (tmp_path / "a.b").write_text("b")
    (tmp_path / "link").symlink_to(tmp_path / "a.b")
    digest = {name: hashlib.sha256(name.encode()).hexdigest() for name in ("b", "c")}
    lines = f"a/c\0{digest['c']}\na.b\0{digest['b']}\n"  # by components: ("a", "c") < ("a.b",)
    assert sha256_tree(tmp_path) == sha256_path(tmp_path) == hashlib.sha256(lines.encode()).hexdigest()
    (tmp_path / "a" / "c").write_text("changed")
    assert sha256_tree(tmp_path) != hashlib.sha256(lines.encode()).hexdigest()


def test_files_in_memory_hash_their_sorted_paths_and_byte_hashes():
    files = {"b.py": b"2", "a/x.json": b"1"}
    lines = "".join(f"{p}\0{hashlib.sha256(files[p]).hexdigest()}\n" for p in ("a/x.json", "b.py"))
    assert sha256_files(files) == hashlib.sha256(lines.encode()).hexdigest()


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
