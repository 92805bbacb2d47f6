#!/usr/bin/env python3
"""Lay a writable Hugging Face hub cache over the host's read-only shared one.

Run by the entrypoint (start.sh) as the container user, when the agent mounted the host's
shared cache (GPURENTAL_HF_SHARED, read-only) and pointed HF_HOME at a writable directory
of the instance (on its /workspace volume). For every repository of the shared cache it
makes, in the writable cache:

- ``blobs/<hash>``: a symlink to the shared blob (nothing is copied);
- ``snapshots/<rev>/<path>``: the same relative link the hub makes (``../../blobs/<hash>``),
  so that it resolves through the writable ``blobs`` directory;
- ``refs/<name>``: a copy (a few bytes), which the hub may rewrite.

Every directory is the instance's own, so the hub can download new files and revisions
next to the shared ones (and ``hf auth login`` can write ``$HF_HOME/token``), while the
shared files themselves stay read-only. An overlay filesystem would do the same, but
mounting one needs CAP_SYS_ADMIN, which instance containers never have.

Run again at each start: links to models evicted from the shared cache since (dangling)
are removed, models filled since are added. Standard library only; idempotent.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

KINDS = ("models--", "datasets--", "spaces--")


def _link(target: str, path: Path) -> bool:
    if os.path.lexists(path):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)
    return True


def _seed_repo(shared: Path, mine: Path) -> int:
    made = 0
    for blob in sorted((shared / "blobs").glob("*")) if (shared / "blobs").is_dir() else []:
        made += _link(str(blob), mine / "blobs" / blob.name)
    refs = shared / "refs"
    if refs.is_dir():
        for ref in refs.rglob("*"):
            dest = mine / "refs" / ref.relative_to(refs)
            if ref.is_file() and not os.path.lexists(dest):
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(ref.read_bytes())
    snapshots = shared / "snapshots"
    if snapshots.is_dir():
        for entry in snapshots.rglob("*"):
            dest = mine / "snapshots" / entry.relative_to(snapshots)
            if entry.is_symlink():
                # ../../blobs/<hash>: resolves through this cache's own blobs/ link.
                made += _link(os.readlink(entry), dest)
            elif entry.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
            elif entry.is_file():  # a cache written without symlinks: link the file itself
                made += _link(str(entry), dest)
    return made


def _prune(hub: Path) -> int:
    """Remove dangling links (models evicted from the shared cache), then empty folders."""
    removed = 0
    for root, dirs, files in os.walk(hub, topdown=False):
        for name in files + dirs:
            path = Path(root) / name
            if path.is_symlink() and not path.exists():
                path.unlink()
                removed += 1
        if root != str(hub) and not os.listdir(root):
            os.rmdir(root)
    # A repository left with refs only (its shared files gone, nothing of the instance's
    # own) would send the hub to snapshots that no longer exist: drop it.
    for repo in hub.iterdir() if hub.is_dir() else []:
        snapshots, blobs = repo / "snapshots", repo / "blobs"
        if (
            repo.is_dir()
            and not repo.is_symlink()
            and not (snapshots.is_dir() and any(snapshots.iterdir()))
            and not (blobs.is_dir() and any(blobs.iterdir()))
        ):
            shutil.rmtree(repo)
    return removed


def seed(shared_home: Path, hub: Path) -> tuple[int, int]:
    """(links made, dangling links removed) for the writable hub cache ``hub``."""
    hub.mkdir(parents=True, exist_ok=True)
    removed = _prune(hub)
    made = 0
    shared_hub = shared_home / "hub"
    if shared_hub.is_dir():
        for repo in sorted(shared_hub.iterdir()):
            if repo.is_dir() and repo.name.startswith(KINDS):
                made += _seed_repo(repo, hub / repo.name)
    return made, removed


def main() -> int:
    shared = os.environ.get("GPURENTAL_HF_SHARED", "")
    home = os.environ.get("HF_HOME", "")
    if not shared or not home or not os.path.isdir(shared):
        return 0
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(home) / "hub")
    try:
        made, removed = seed(Path(shared), hub)
    except OSError as exc:  # never keep the instance from starting
        print(f"gpurental: the shared Hugging Face cache was not laid out: {exc}", file=sys.stderr)
        return 0
    print(f"gpurental: Hugging Face cache {hub} over {shared} ({made} new links, {removed} gone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
