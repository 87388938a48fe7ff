"""bench/loop_identity.py's comparison: a manifest that differs only in its runtime hash (a runtime
source moved) is listed apart and is no difference; any other change to it is one."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("loop_identity_under_test", ROOT / "bench" / "loop_identity.py")
loop_identity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(loop_identity)


def _side(tmp_path: Path, name: str, manifest: dict) -> dict:
    path = tmp_path / name / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    sha = loop_identity.hashlib.sha256(path.read_bytes()).hexdigest()
    return {"files": {"0/artifacts/manifest.json": sha},
            "manifests": {"0/artifacts/manifest.json": loop_identity.without_runtime(path)}}


def test_a_manifest_differing_only_in_its_runtime_hash_is_listed_apart_and_not_a_difference(tmp_path):
    before = _side(tmp_path, "a", {"key": {"seed": 0, "runtime_sha256": "11"}, "C": 0.5})
    after = _side(tmp_path, "b", {"key": {"seed": 0, "runtime_sha256": "22"}, "C": 0.5})
    report = loop_identity.compare(before, after)
    assert report["files"]["different"] == []
    assert report["files"]["different_only_in_runtime_sha256"] == ["0/artifacts/manifest.json"]
    assert report["runtime_sha256"] == {"before": ["11"], "after": ["22"]}


def test_a_manifest_differing_in_anything_else_is_a_difference(tmp_path):
    before = _side(tmp_path, "a", {"key": {"seed": 0, "runtime_sha256": "11"}, "C": 0.5})
    after = _side(tmp_path, "b", {"key": {"seed": 0, "runtime_sha256": "22"}, "C": 0.6})
    report = loop_identity.compare(before, after)
    assert report["files"]["different"] == ["0/artifacts/manifest.json"] and "runtime_sha256" not in report
