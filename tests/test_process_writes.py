"""Under the process executor (real bubblewrap) no spelling of a host path opens it for writing:
a running Docker container's layer files by their path, through /proc/self/root, /proc/PID/root
and a symlink; a host file reopened through its descriptor; /dev/std* links. A sandbox whose own
mount table leaves something of the host writable never starts the strategy."""
import json
import shutil
import tempfile
from pathlib import Path
from textwrap import dedent

import pytest

from evolver import cli
from sandbox import process_executor
from conftest import curate_files
from sandbox.docker_executor import DockerExecutor, docker_client
from sandbox.process_executor import ProcessExecutor, probe_bwrap

from conftest import SAMPLE_CORPUS

PROBE_LABEL = "curateevo.test-process-writes"

ATTEMPTS = """
import glob, os, stat
def attempt(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        return type(exc).__name__
    try:
        mode = os.fstat(fd).st_mode
        return "wrote" if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a file"
    finally:
        os.close(fd)
def create(folder):
    try:
        os.close(os.open(os.path.join(folder, "owned"), os.O_CREAT | os.O_WRONLY, 0o644))
        return "wrote"
    except OSError as exc:
        return type(exc).__name__
def spellings(path):
    found = [path, "/proc/self/root" + path, "/proc/thread-self/root" + path, "/proc/1/root" + path,
             f"/proc/{os.getppid()}/root" + path, "/proc/self/cwd/" + "../" * 12 + path.lstrip("/")]
    found += [p + "/root" + path for p in glob.glob("/proc/[0-9]*")]
    links = [os.path.join(folder, "link-" + str(abs(hash(path)))) for folder in (os.getcwd(), "/tmp")]
    for link in links:   # a symlink in the output folder (removed before the end) and in /tmp
        os.symlink(path, link)
    return found + links
"""


@pytest.fixture(scope="module")
def container_layer():
    """A running container's files on the host: its merged root and its upper layer."""
    client = docker_client()   # no skip: the project's machines have an engine
    image = DockerExecutor(client).image
    container = client.containers.run(image, ["sleep", "600"], detach=True, network_mode="none",
                                      labels={PROBE_LABEL: "1"})
    try:
        container.reload()
        data = container.attrs["GraphDriver"]["Data"]
        yield Path(data["MergedDir"]), Path(data["UpperDir"])
    finally:
        container.remove(force=True)
        client.close()


def test_no_spelling_opens_a_running_containers_layer_or_a_host_file_for_writing(strategy, tmp_path, container_layer,
                                                                                    request):
    assert probe_bwrap() is None, f"bubblewrap cannot run here ({probe_bwrap()}); scripts/docker-engine.sh installs it"
    merged, upper = container_layer
    host = Path(tempfile.mkdtemp(prefix="curateevo-host-", dir="/var/tmp"))   # seen read-only at its own path
    request.addfinalizer(lambda: shutil.rmtree(host, ignore_errors=True))
    host.chmod(0o777)
    (host / "file").write_text("original\n")
    (host / "file").chmod(0o666)   # its permissions let anyone write: only the sandbox's mounts stop it
    targets = {"merged-file": str(merged / "etc" / "hostname"), "merged-dir": str(merged / "tmp"),
               "upper-dir": str(upper), "host-file": str(host / "file"), "host-dir": str(host)}
    before = (merged / "etc" / "hostname").read_bytes()
    s = strategy(ATTEMPTS + dedent(f"""
        def curate(raw, ctx):
            targets = {targets!r}
            verdicts = {{}}
            for name, path in targets.items():
                for i, p in enumerate(spellings(path)):
                    verdicts[f"{{name}}{{i}}"] = create(p) if name.endswith("-dir") else attempt(p)
            held = [os.open(targets["host-file"], os.O_RDONLY), os.open("/etc/hostname", os.O_RDONLY)]
            for fd in os.listdir("/proc/self/fd"):   # every descriptor reopened for writing
                verdicts[f"fd{{fd}}"] = attempt(f"/proc/self/fd/{{fd}}")
            for name in ("stdin", "stdout", "stderr"):
                verdicts[name] = attempt("/dev/" + name)
            for link in glob.glob(os.path.join(os.getcwd(), "link-*")):
                os.unlink(link)
            out = honest(raw)
            out["memory"] = [{{"id": k, "key": k, "content": v}} for k, v in verdicts.items()]
            return out
    """))
    for executor in (ProcessExecutor(), ProcessExecutor(trusted=True)):   # generated, and the user's own
        out = tmp_path / f"out-{id(executor)}"
        result = curate_files(s, [SAMPLE_CORPUS], out, executor=executor)
        verdicts = {r["key"]: r["content"] for r in map(json.loads, (result.out_dir / "memory.jsonl").read_text().splitlines())}
        assert len(verdicts) > 40
        assert "wrote" not in verdicts.values(), {k: v for k, v in verdicts.items() if v == "wrote"}
    assert (merged / "etc" / "hostname").read_bytes() == before and (host / "file").read_text() == "original\n"
    assert not any((p / "owned").exists() for p in (merged / "tmp", upper, host))


def test_a_job_whose_own_mount_table_leaks_never_starts_its_strategy(strategy, tmp_path, monkeypatch, capsys, request):
    """What the probe cannot see (a mount made between the probe and the job that bwrap leaves
    writable), the job's own check does: here a writable host folder bound into its sandbox."""
    assert probe_bwrap() is None, f"bubblewrap cannot run here ({probe_bwrap()})"
    leak = Path(tempfile.mkdtemp(prefix="curateevo-leak-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(leak, ignore_errors=True))
    leak.chmod(0o777)
    real = process_executor.bwrap_argv
    monkeypatch.setattr(process_executor, "bwrap_argv",
                        lambda job: real(job)[:-1] + ["--bind", str(leak), str(leak), "--"])
    s = strategy(dedent(f"""
        def curate(raw, ctx):
            open({str(leak / "ran")!r}, "w").close()
            return honest(raw)
    """))
    assert cli.main(["curate", "--strategy", str(s), "--corpus", str(SAMPLE_CORPUS), "--out", str(tmp_path / "out"),
                     "--sandbox", "process", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert (f"the process sandbox refused to start the strategy: this sandbox leaves {leak} of the host writable"
            in err) and err.count("\n") == 1, err
    assert not (leak / "ran").exists(), "the strategy never started"
    assert not (tmp_path / "out").exists()
