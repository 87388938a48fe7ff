"""The run's integrity: the workspace's tags must name the commits its journal recorded."""
from __future__ import annotations

from base.errors import UserError
from experiments import journal
from evolver.store import RunStore
from workspace.repository import Workspace


def recorded_commits(store: RunStore) -> dict[str, str]:
    """Tag → commit as the journal recorded them: each epoch's candidate (curate, decide,
    propose) and `best` (the last accepted decision)."""
    tags = {}
    for event in journal.done(store.journal.events()):
        result = event.result
        if not isinstance(result, dict) or not isinstance(event.epoch, int) or event.epoch < 0:
            continue
        if event.stage in ("curate", "decide") and result.get("commit"):
            tags[f"epoch-{event.epoch}"] = result["commit"]
        if event.stage == "propose" and result.get("candidate"):
            tags[f"epoch-{event.epoch + 1}"] = result["candidate"]
        if event.stage == "decide" and result.get("accepted"):
            tags["best"] = result["commit"]
    return tags


def check_workspace(store: RunStore, ws: Workspace) -> None:
    """UserError when a tag of the workspace no longer names the commit the journal recorded
    (the strategy was changed outside curateevo): nothing built on it can be trusted."""
    for tag, recorded in recorded_commits(store).items():
        current = ws.resolve(tag) if tag in ws.refs() else None
        if current != recorded:
            raise UserError(f"{ws.path}: tag {tag} names {current[:12] if current else 'nothing'} but the journal "
                            f"recorded {recorded[:12]}: the workspace was changed outside curateevo; nothing was run")


def check_artifacts(store: RunStore, only: int | None = None) -> None:
    """UserError naming the file when a curated epoch's artifacts no longer hash as its
    manifest.json recorded them (deleted or edited in place): what was trained and decided on
    them cannot be trusted, and nothing is run (`curateevo repair` rebuilds them). `only`: that epoch."""
    from base.files import sha256_file
    from sandbox.manifest import Manifest, manifest_path

    curated = sorted({e.epoch for e in journal.done(store.journal.events(), "curate")
                      if isinstance(e.epoch, int) and e.epoch >= 0 and not (e.result or {}).get("failed")})
    for epoch in curated if only is None else [e for e in curated if e == only]:
        fix = (f"rebuild it with `curateevo repair {store.root} --epoch {epoch}` (or restore it from a backup); "
               "nothing was run")
        folder = store.epoch_dir(epoch) / "artifacts"
        try:
            artifacts = Manifest.read(folder).artifacts
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise UserError(f"{manifest_path(folder)} is missing or damaged, though epoch {epoch} was curated; "
                            f"{fix}") from None
        for name, recorded in sorted(artifacts.items()):
            path = folder / name
            if not path.is_file():
                raise UserError(f"{path} was deleted after epoch {epoch} was curated; {fix}")
            if recorded.get("sha256") and sha256_file(path) != recorded["sha256"]:
                raise UserError(f"{path} changed after epoch {epoch} was curated (sha256 {recorded['sha256'][:12]}… "
                                f"recorded in manifest.json); {fix}")
