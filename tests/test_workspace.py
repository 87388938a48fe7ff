"""The strategy workspace: the git model of a run, on real repositories in tmp_path."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from base.errors import UserError
from sandbox.strategy_files import MAX_FILE_BYTES, inputs_files, strategy_files
from workspace.repository import Workspace

SEED = '''"""Seed strategy: keep successful trajectories as SFT records."""
from helper import is_success


def curate(raw, ctx):
    sft = [dict(id=r["id"], messages=r["messages"], tools=r.get("tools", [])) for r in raw if is_success(r)]
    return {"sft": sft, "rl": [], "memory": []}
'''
HELPER = '''def is_success(record):
    return bool((record.get("outcome") or {}).get("success"))
'''
PARAMS = {"lambda": 0.3, "n_ref": 100000, "seed": 0}
FAILED = [{"failed_point": "wrong argument order", "evidence": "...", "curation_hint": "keep multi-arg calls",
           "family": "argument", "task_ids": ["multi_turn_base_12"], "count": 3}]
SIGNALS = {"families": {"argument": 3}, "forgetting": [], "boundary": [], "rare": []}


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # a test may plant GIT_DIR
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout


@pytest.fixture
def seed_dir(tmp_path) -> Path:
    d = tmp_path / "seed"
    d.mkdir()
    (d / "strategy.py").write_text(SEED)
    (d / "helper.py").write_text(HELPER)
    (d / "README.md").write_text("not a strategy file\n")
    (d / "__pycache__").mkdir()
    (d / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\x00bytecode")
    return d


@pytest.fixture
def ws(tmp_path, seed_dir) -> Workspace:
    return Workspace.create(tmp_path / "run" / "strategy", seed_dir, PARAMS)


def revise(ws: Workspace, rev="best", **edits: str) -> dict[str, bytes]:
    """A candidate: the strategy files of `rev` with some rewritten, as a proposer returns them."""
    files = {k: v for k, v in ws.files(rev).items() if not k.startswith("inputs/")}
    return {**files, **{name: text.encode() for name, text in edits.items()}}


def with_inputs(ws: Workspace, files: dict, inputs: dict, parent="best") -> dict[str, bytes]:
    """What the loop commits: the candidate's files plus this epoch's inputs (the parent's, updated)."""
    kept = {k: v for k, v in ws.files(parent).items() if k.startswith("inputs/")}
    return {**files, **kept, **inputs_files(inputs)}


def effective_and_efficient(ws: Workspace, tmp: Path, epoch: int, parent="best") -> tuple[str, str]:
    cand = revise(ws, parent, **{"strategy.py": SEED.replace("rl\": []", f"rl\": [] or []  # e{epoch}")})
    inputs = {"failed_points": FAILED, "signals": SIGNALS, "profile.json": {"sft": {"count": epoch}}}
    first = ws.commit_candidate(epoch, with_inputs(ws, cand, inputs, parent), f"epoch {epoch}: effectiveness revision",
                                parent=parent)
    cand["strategy.py"] += f"# efficiency {epoch}\n".encode()
    second = ws.commit_candidate(epoch, with_inputs(ws, cand, inputs, parent), f"epoch {epoch}: efficiency revision",
                                 parent=parent)
    ws.tag_epoch(epoch, second)
    return first, second


def decision(ws: Workspace, name: str) -> str:
    """The message of the decision tag `name` (accepted/epoch-1, …)."""
    return git(ws.path, "cat-file", "-p", name).split("\n\n", 1)[1]


# -- create / open ------------------------------------------------------------------------------

def test_create_commits_the_seed_on_main_tagged_epoch_0_and_best(ws):
    seed = ws.resolve("main")
    assert ws.resolve("epoch-0") == ws.resolve("best") == seed == ws.resolve("main")
    assert ws.files(seed) == {"strategy.py": SEED.encode(), "helper.py": HELPER.encode(),
                              "inputs/params.json": b'{"lambda":0.3,"n_ref":100000,"seed":0}\n'}
    [entry] = ws.log()
    assert entry["message"] == "seed strategy ρ0" and entry["tags"] == ["best", "epoch-0"]
    assert git(ws.path, "cat-file", "-t", "best").strip() == "tag"  # best is annotated
    assert (ws.path / "strategy.py").read_text() == SEED  # the working tree shows main
    assert git(ws.path, "status", "--porcelain") == ""


def test_the_project_seed_strategy_makes_a_workspace_whose_checkout_is_the_seed(tmp_path):
    seed = Path(__file__).resolve().parent.parent / "curation_strategies" / "seed"
    ws = Workspace.create(tmp_path / "strategy", seed, PARAMS)
    out = tmp_path / "replay"
    for rel, data in ws.files("best").items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    assert (out / "strategy.py").read_bytes() == (seed / "strategy.py").read_bytes()
    assert strategy_files(out) == ws.files("epoch-0")


def test_create_refuses_a_non_empty_path_and_open_refuses_a_plain_directory(tmp_path, seed_dir):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        Workspace.create(tmp_path / "taken", seed_dir, PARAMS)
    with pytest.raises(UserError, match="not a strategy workspace"):
        Workspace.open(tmp_path / "taken")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".taken")]  # no half-built temp dir


def test_open_sees_what_create_made(ws):
    again = Workspace.open(ws.path)
    assert again.resolve("best") == ws.resolve("best") and again.clock_base == ws.clock_base


# -- candidates ---------------------------------------------------------------------------------

def test_two_candidate_commits_continue_branch_candidates_epoch_n_with_their_inputs(ws, tmp_path):
    seed = ws.resolve("best")
    first, second = effective_and_efficient(ws, tmp_path, 1)
    assert ws.resolve("candidates/epoch-1") == ws.resolve("epoch-1") == ws.resolve(1) == second
    [row2, row1, row0] = ws.log("candidates/epoch-1")
    assert (row2["sha"], row2["parents"]) == (second, [first])
    assert (row1["sha"], row1["parents"]) == (first, [seed])
    assert row1["message"] == "epoch 1: effectiveness revision" and row0["sha"] == seed
    files = ws.files(second)
    assert files["inputs/failed_points.json"].endswith(b"\n") and b": " not in files["inputs/signals.json"]
    assert files["inputs/signals.json"] == b'{"boundary":[],"families":{"argument":3},"forgetting":[],"rare":[]}\n'
    assert files["inputs/params.json"] == ws.files(seed)["inputs/params.json"]  # inherited from the parent
    assert sorted(files) == ["helper.py", "inputs/failed_points.json", "inputs/params.json",
                             "inputs/profile.json", "inputs/signals.json", "strategy.py"]
    assert ws.resolve("main") == seed  # committing a candidate never moves main


def test_repeating_the_same_candidate_commit_on_resume_makes_no_second_commit(ws, tmp_path):
    cand = with_inputs(ws, revise(ws, **{"strategy.py": SEED + "# revised\n"}), {"signals": SIGNALS})
    first = ws.commit_candidate(1, cand, "epoch 1: effectiveness revision")
    assert ws.commit_candidate(1, cand, "epoch 1: effectiveness revision") == first
    unchanged = ws.commit_candidate(1, cand, "epoch 1: efficiency revision (no change)")
    assert ws.log(unchanged)[0]["parents"] == [first]  # a no-op revision is still recorded


def test_the_commit_holds_exactly_the_files_given(ws, tmp_path):
    files = with_inputs(ws, revise(ws), {"signals": SIGNALS})
    files["inputs/failed_points.json"] = b"[]\n"
    sha = ws.commit_candidate(1, files, "m")
    assert ws.files(sha) == files
    del files["helper.py"]
    assert "helper.py" not in ws.files(ws.commit_candidate(1, files, "without the helper"))


@pytest.mark.parametrize("path, data, reason", [
    (".gitattributes", b"*.py filter=evil\n", ".git"), ("table.py", b"#" * (MAX_FILE_BYTES + 1), "limit"),
    ("notes.txt", b"scratch", "not a strategy file"), ("pkg/__init__.py", b"", "not a strategy file"),
    ("../escape.py", b"", "escapes"), ("inputs/../../x.json", b"{}", "escapes"), ("inputs/a.txt", b"", "not a strategy file"),
    (".git/hooks/post-commit", b"#!/bin/sh\nid\n", ".git"), ("bad\x1bname.py", b"", "control characters"),
])
def test_a_candidate_with_anything_but_strategy_files_is_refused_with_a_reason(ws, path, data, reason):
    files = {**with_inputs(ws, revise(ws), {"signals": SIGNALS}), path: data}
    with pytest.raises(UserError, match=reason):
        ws.commit_candidate(1, files, "m")
    assert "candidates/epoch-1" not in ws.refs()  # nothing was committed
    with pytest.raises(UserError, match="no strategy.py"):
        ws.commit_candidate(1, {"helper.py": b""}, "m")


@pytest.mark.parametrize("plant, reason", [
    (lambda d: (d / "helper.py").unlink() or (d / "helper.py").symlink_to("/etc/passwd"), "symbolic link"),
    (lambda d: os.mkfifo(d / "pipe.py"), "named pipe"),
    (lambda d: (d / "table.py").write_bytes(b"#" * (MAX_FILE_BYTES + 1)), "limit"),
])
def test_a_strategy_directory_with_links_pipes_or_oversized_modules_is_refused(seed_dir, plant, reason):
    plant(seed_dir)
    with pytest.raises(UserError, match=reason):
        strategy_files(seed_dir)


def test_input_names_that_are_not_plain_file_names_and_non_json_values_are_refused():
    with pytest.raises(UserError, match="plain file name"):
        inputs_files({"../escape": 1})
    with pytest.raises(UserError, match="canonical JSON"):
        inputs_files({"profile": {"c": float("nan")}})


# -- decisions ----------------------------------------------------------------------------------

def test_accept_fast_forwards_main_and_moves_best(ws, tmp_path):
    _, evaluated = effective_and_efficient(ws, tmp_path, 1)
    ws.accept("epoch-1", "epoch 1 accepted: P=0.41 C=0.62 J=0.224")
    assert ws.resolve("main") == ws.resolve("best") == evaluated
    assert git(ws.path, "cat-file", "-p", "best").endswith("epoch 1 accepted: P=0.41 C=0.62 J=0.224\n")
    assert ws.resolve("accepted/epoch-1") == evaluated
    assert decision(ws, "accepted/epoch-1") == "epoch 1 accepted: P=0.41 C=0.62 J=0.224\n"
    assert (ws.path / "strategy.py").read_text() == ws.files(evaluated)["strategy.py"].decode()
    ws.accept("epoch-1", "epoch 1 accepted: P=0.41 C=0.62 J=0.224")  # a resumed run may repeat it


def test_reject_leaves_main_and_best_and_keeps_the_branch(ws, tmp_path):
    seed = ws.resolve("best")
    first, second = effective_and_efficient(ws, tmp_path, 1)
    ws.reject("epoch-1", "epoch 1 rejected: J=0.11 <= best J=0.20")
    assert ws.resolve("main") == ws.resolve("best") == seed
    assert ws.resolve("candidates/epoch-1") == second and ws.resolve("rejected/epoch-1") == second
    assert [r for r in ws.refs() if r.startswith(("accepted/", "rejected/"))] == ["rejected/epoch-1"]
    assert decision(ws, "rejected/epoch-1") == "epoch 1 rejected: J=0.11 <= best J=0.20\n"
    # the next candidate starts again from best
    first2, _ = effective_and_efficient(ws, tmp_path, 2)
    assert ws.log(first2)[0]["parents"] == [seed]


def test_accept_refuses_a_candidate_that_does_not_descend_from_main(ws, tmp_path):
    effective_and_efficient(ws, tmp_path, 1)
    ws.accept(1, "accepted")
    _, stale = effective_and_efficient(ws, tmp_path, 2, parent="epoch-0")
    with pytest.raises(UserError, match="does not descend from main"):
        ws.accept(stale, "accepted")
    assert ws.resolve("main") == ws.resolve("epoch-1") == ws.resolve("best")


def test_a_decision_is_recorded_once_and_the_accepted_lineage_cannot_be_rejected(ws, tmp_path):
    effective_and_efficient(ws, tmp_path, 1)
    ws.reject(1, "rejected")
    with pytest.raises(UserError, match="already rejected"):
        ws.accept(1, "accepted after all")
    with pytest.raises(UserError, match="already part of main"):
        ws.reject("epoch-0", "rejected")
    with pytest.raises(UserError, match="cannot be moved"):
        ws.tag_epoch(1, "epoch-0")


def test_history_is_never_lost_after_accept_and_reject(ws, tmp_path):
    made = [ws.resolve("best")]
    made += effective_and_efficient(ws, tmp_path, 1)
    ws.accept(1, "accepted")
    made += effective_and_efficient(ws, tmp_path, 2)
    ws.reject(2, "rejected")
    made += effective_and_efficient(ws, tmp_path, 3)
    ws.accept(3, "accepted")
    reachable = set(git(ws.path, "rev-list", "--all").split())  # refs only, no reflog
    assert set(made) <= reachable
    assert set(ws.refs()) >= {"candidates/epoch-1", "candidates/epoch-2", "candidates/epoch-3",
                              "rejected/epoch-2", "accepted/epoch-1", "accepted/epoch-3"}
    assert [r["sha"] for r in ws.log("main")] == [made[6], made[5], made[2], made[1], made[0]]
    git(ws.path, "fsck", "--strict", "--no-dangling")


# -- reading ------------------------------------------------------------------------------------

def test_resolve_accepts_epochs_names_shas_and_branches_and_names_what_exists_otherwise(ws, tmp_path):
    _, second = effective_and_efficient(ws, tmp_path, 3)
    for rev in (3, "3", "epoch-3", "candidates/epoch-3", second, second[:10]):
        assert ws.resolve(rev) == second
    assert ws.resolve("best") == ws.resolve("main") == ws.resolve(0)
    for bad in ("epoch-9", "nope", "-x", "main with space"):
        with pytest.raises(UserError) as err:
            ws.resolve(bad)
        assert repr(bad) in str(err.value) and "epoch-3" in str(err.value) and "main" in str(err.value)


def test_diff_between_epochs_shows_the_change(ws, tmp_path):
    effective_and_efficient(ws, tmp_path, 1)
    patch = ws.diff("epoch-0", "epoch-1")
    assert "--- a/strategy.py\n+++ b/strategy.py\n" in patch
    assert '-    return {"sft": sft, "rl": [], "memory": []}\n' in patch
    assert "+# efficiency 1\n" in patch
    assert "+++ b/inputs/failed_points.json" in patch and "--- /dev/null" in patch
    assert "inputs/" not in ws.diff("epoch-0", "epoch-1", include_inputs=False)
    assert ws.diff("epoch-1", "candidates/epoch-1") == ""
    summary = {row["path"]: row for row in ws.diff_summary(0, 1)}
    assert summary["strategy.py"] == {"path": "strategy.py", "status": "modified", "added": 2, "removed": 1}
    assert summary["inputs/signals.json"]["status"] == "added"


def test_strategy_files_reads_py_modules_and_inputs_json_of_a_directory_or_its_strategy_py(tmp_path, seed_dir):
    (seed_dir / "inputs").mkdir()
    (seed_dir / "inputs" / "params.json").write_text("{}")
    (seed_dir / "inputs" / "notes.txt").write_text("ignored")
    (seed_dir / "sub").mkdir()
    (seed_dir / "sub" / "deep.py").write_text("ignored")
    expected = {"strategy.py": SEED.encode(), "helper.py": HELPER.encode(), "inputs/params.json": b"{}"}
    assert strategy_files(seed_dir) == expected
    assert strategy_files(seed_dir / "strategy.py") == expected
    with pytest.raises(UserError, match="no strategy.py"):
        strategy_files(seed_dir / "sub")
    (seed_dir / "linked.py").symlink_to(seed_dir / "helper.py")
    with pytest.raises(UserError, match="linked.py.*symbolic link"):
        strategy_files(seed_dir)


# -- trust and determinism ----------------------------------------------------------------------

HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "reference-transaction",
         "post-checkout", "post-merge", "post-rewrite", "pre-auto-gc")


def plant_hooks(hooks_dir: Path, marker: Path) -> None:
    hooks_dir.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        hook = hooks_dir / name
        hook.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\nexit 1\n")
        hook.chmod(0o755)


@pytest.mark.parametrize("config_points_at_them", [False, True])
def test_a_hook_planted_in_git_hooks_does_not_run(ws, tmp_path, config_points_at_them):
    marker = tmp_path / "hook-ran"
    plant_hooks(ws.path / ".git" / "hooks", marker)
    if config_points_at_them:  # someone edited the repo config: hooks stay off all the same
        git(ws.path, "config", "core.hooksPath", str(ws.path / ".git" / "hooks"))
    effective_and_efficient(ws, tmp_path, 1)
    ws.accept(1, "accepted")
    effective_and_efficient(ws, tmp_path, 2)
    ws.reject(2, "rejected")
    assert not marker.exists()
    assert ws.resolve("best") == ws.resolve("epoch-1")
    # the planted hook is live: plain git pointed at it runs it (and it blocks the commit)
    proc = subprocess.run(["git", "-C", str(ws.path), "-c", "core.hooksPath=.git/hooks", "-c", "user.name=x",
                           "-c", "user.email=x@y", "commit", "--allow-empty", "-m", "x"], capture_output=True)
    assert proc.returncode != 0 and "pre-commit" in marker.read_text()


def run_operations(root: Path, seed_dir: Path) -> dict[str, str]:
    """A fixed sequence of workspace operations; returns every ref → object id."""
    ws = Workspace.create(root / "strategy", seed_dir, PARAMS)
    effective_and_efficient(ws, root, 1)
    ws.accept(1, "epoch 1 accepted")
    effective_and_efficient(ws, root, 2)
    ws.reject(2, "epoch 2 rejected")
    out = git(ws.path, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in out.splitlines())


def test_same_operations_give_the_same_shas_in_two_fresh_workspaces(tmp_path, seed_dir):
    first = run_operations(tmp_path / "a", seed_dir)
    second = run_operations(tmp_path / "b", seed_dir)
    assert first == second and len(first) == 9  # main, 2 branches, best, 3 epoch tags, 2 decisions


def test_a_hostile_global_git_config_and_no_git_identity_change_nothing(tmp_path, seed_dir, monkeypatch):
    expected = run_operations(tmp_path / "clean", seed_dir)
    home, marker = tmp_path / "home", tmp_path / "hook-ran"
    plant_hooks(home / "hooks", marker)
    plant_hooks(home / "template" / "hooks", marker)
    home.joinpath(".gitconfig").write_text(
        "[user]\n\tname = Mallory\n\temail = m@evil\n[commit]\n\tgpgSign = true\n[tag]\n\tgpgSign = true\n"
        f"[core]\n\thooksPath = {home / 'hooks'}\n[init]\n\ttemplateDir = {home / 'template'}\n"
        "\tdefaultBranch = trunk\n[i18n]\n\tcommitEncoding = ISO-8859-1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "not-this-repo"))
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
    assert run_operations(tmp_path / "hostile", seed_dir) == expected
    assert not marker.exists()


def test_the_clock_base_is_chosen_at_create_and_kept_by_open(tmp_path, seed_dir, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    ws = Workspace.create(tmp_path / "s", seed_dir, PARAMS)
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    assert ws.log()[0]["date"] == 1700000000 and Workspace.open(ws.path).clock_base == 1700000000
    other = Workspace.create(tmp_path / "t", seed_dir, PARAMS, clock_base=1700000000)
    assert other.resolve("best") == ws.resolve("best")
