"""The host's shared Hugging Face cache: fill, list and evict, on the host's filesystem.

The control plane asks (``protocol.MODELCACHE``: fill, evict or list); this module does
the work in the agent's own cache directory (``GPURENTAL_HF_CACHE_DIR``) and the agent
reports what is there now (``protocol.MODELCACHE_REPORT``).

Filling works offline. The source is a directory or an archive (.tar, .tar.gz, .tgz)
holding either

- a Hugging Face cache (``models--org--name/{blobs,refs,snapshots}``, or a ``hub/`` folder
  of them), merged into this cache as it is; or
- a plain model directory (``config.json``, weights, tokenizer files…), laid out into
  cache form under the repository id the operator names: each file becomes a blob named
  by its SHA-256, a snapshot named by a hash of the whole file set links to them, and
  ``refs/main`` names that snapshot, so ``from_pretrained("org/name")`` finds it offline.

Sources are read only from the agent's import directory (``GPURENTAL_MODEL_IMPORT_DIR``):
a message names a file there, never an arbitrary host path (DESIGN: anything that becomes
a host path comes from the agent's configuration). Archives are unpacked with tarfile's
"data" filter (no links out, no devices, no absolute paths). A fill is built in a
temporary folder inside the cache and moved into place, so a container never sees half a
model; an eviction moves the repository aside first, then deletes it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,63}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
ARCHIVES = (".tar", ".tar.gz", ".tgz")
TMP_PREFIX = ".gpurental-"


class CacheError(ValueError):
    """A fill or eviction that cannot be done; the message says why, for the operator."""


@dataclass(frozen=True)
class CachedRepo:
    repo_id: str
    revisions: tuple[str, ...]
    refs: dict
    size_bytes: int
    files: int

    def as_dict(self) -> dict:
        return {
            "repo_id": self.repo_id,
            "revisions": list(self.revisions),
            "refs": dict(self.refs),
            "size_bytes": self.size_bytes,
            "files": self.files,
        }


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.match(repo_id or "") or ".." in repo_id:
        raise CacheError(
            f"{repo_id!r} is not a Hugging Face repository id (org/name: letters, digits, "
            "'.', '_' and '-')"
        )
    return repo_id


def repo_folder(repo_id: str) -> str:
    """models--org--name, as the hub names a model's folder."""
    return "models--" + check_repo_id(repo_id).replace("/", "--")


def repo_id_of(folder: str) -> str:
    return folder.removeprefix("models--").replace("--", "/")


def hub_dir(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "hub"


# --- listing ------------------------------------------------------------------------


def _repo(path: Path) -> CachedRepo:
    blobs = path / "blobs"
    size = files = 0
    if blobs.is_dir():
        for blob in blobs.iterdir():
            if blob.is_file() and not blob.is_symlink():
                size += blob.stat().st_size
                files += 1
    snapshots = path / "snapshots"
    revisions = tuple(sorted(p.name for p in snapshots.iterdir())) if snapshots.is_dir() else ()
    refs = {}
    if (path / "refs").is_dir():
        for ref in sorted((path / "refs").rglob("*")):
            if ref.is_file():
                refs[str(ref.relative_to(path / "refs"))] = ref.read_text().strip()[:64]
    return CachedRepo(repo_id_of(path.name), revisions, refs, size, files)


def cache_list(cache_dir: str | Path) -> list[CachedRepo]:
    """The models in the cache, by repository id."""
    hub = hub_dir(cache_dir)
    if not hub.is_dir():
        return []
    return [
        _repo(path)
        for path in sorted(hub.iterdir())
        if path.is_dir() and path.name.startswith("models--")
    ]


# --- filling ------------------------------------------------------------------------


def resolve_source(import_dir: str | Path, source: str) -> Path:
    """The file or folder ``source`` names inside the import directory; CacheError for
    anything outside it (after resolving links) or missing."""
    if not import_dir:
        raise CacheError(
            "this host's agent has no import directory (GPURENTAL_MODEL_IMPORT_DIR); "
            "set one and copy models there"
        )
    root = Path(import_dir).resolve()
    path = (root / source).resolve()
    if path != root and root not in path.parents:
        raise CacheError(f"{source!r} is outside the import directory {root}; copy it there")
    if not path.exists():
        raise CacheError(f"{source!r} is not in the import directory {root}")
    return path


def _unpack(archive: Path, into: Path) -> Path:
    if not archive.name.endswith(ARCHIVES):
        raise CacheError(f"{archive.name}: an archive must be one of {', '.join(ARCHIVES)}")
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise CacheError(f"{archive.name} could not be unpacked: {exc}") from exc
    return into


def _descend(root: Path) -> Path:
    """Past a single top folder (``tar czf m.tgz all-MiniLM-L6-v2/``)."""
    entries = [p for p in root.iterdir() if not p.name.startswith(".")]
    while len(entries) == 1 and entries[0].is_dir() and not _is_repo(entries[0]):
        root = entries[0]
        if root.name == "hub":
            break
        entries = [p for p in root.iterdir() if not p.name.startswith(".")]
    return root


def _is_repo(path: Path) -> bool:
    return path.name.startswith("models--") and (path / "snapshots").is_dir()


def _cache_repos(root: Path) -> list[Path]:
    """The hub repositories a source holds, if it is a cache; [] for a plain model folder."""
    if _is_repo(root):
        return [root]
    for hub in (root / "hub", root):
        repos = [p for p in hub.iterdir() if _is_repo(p)] if hub.is_dir() else []
        if repos:
            return sorted(repos)
    return []


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _lay_out(model_dir: Path, repo_dir: Path) -> str:
    """A plain model folder in cache form under ``repo_dir``; returns the revision."""
    files = sorted(
        p
        for p in model_dir.rglob("*")
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    )
    if not files:
        raise CacheError("the source holds no files")
    hashes = {f: _sha256(f) for f in files}
    listing = "".join(f"{f.relative_to(model_dir)}\0{h}\n" for f, h in hashes.items())
    # 40 hex digits, like a commit id: the same files make the same revision.
    revision = hashlib.sha1(listing.encode(), usedforsecurity=False).hexdigest()
    (repo_dir / "blobs").mkdir(parents=True)
    for f, digest in hashes.items():
        blob = repo_dir / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(f, blob)
        rel = f.relative_to(model_dir)
        link = repo_dir / "snapshots" / revision / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, link.parent), link)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    return revision


def _merge(new: Path, dest: Path) -> None:
    """Move a built repository into the cache: whole when it is new, else the blobs and
    snapshots it adds (existing ones are content-addressed: the same name, the same bytes)
    and its refs."""
    if not dest.exists():
        os.replace(new, dest)
        return
    for part in ("blobs", "snapshots"):
        if not (new / part).is_dir():
            continue
        (dest / part).mkdir(exist_ok=True)
        for entry in (new / part).iterdir():
            if not os.path.lexists(dest / part / entry.name):
                os.replace(entry, dest / part / entry.name)
    if (new / "refs").is_dir():
        for ref in (new / "refs").rglob("*"):
            if ref.is_file():
                target = dest / "refs" / ref.relative_to(new / "refs")
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(ref, target)


def _readable(root: Path) -> None:
    """Containers read the cache as uid 1000, whoever the agent runs as."""
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)  # noqa: S103 - read by every instance: that is the point
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o644)


def cache_fill(
    *, cache_dir: str | Path, import_dir: str | Path, source: str, repo_id: str = ""
) -> list[CachedRepo]:
    """Fill the cache from ``source`` (in the import directory); returns the repositories
    filled, as they are in the cache now. ``repo_id`` names a plain model folder's
    repository (required then); for a cache source it picks one of its repositories."""
    if not cache_dir:
        raise CacheError("this host's agent has no Hugging Face cache (GPURENTAL_HF_CACHE_DIR)")
    if repo_id:
        check_repo_id(repo_id)
    path = resolve_source(import_dir, source)
    hub = hub_dir(cache_dir)
    hub.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=TMP_PREFIX, dir=hub) as work:
        work = Path(work)
        root = _descend(_unpack(path, work / "src") if path.is_file() else path)
        repos = _cache_repos(root)
        if repo_id and repos:
            wanted = repo_folder(repo_id)
            repos = [r for r in repos if r.name == wanted]
            if not repos:
                raise CacheError(f"the cache in {source!r} has no {repo_id}")
        built: list[Path] = []
        if repos:
            for repo in repos:
                copy = work / "build" / repo.name
                shutil.copytree(repo, copy, symlinks=True)
                built.append(copy)
        else:
            if not repo_id:
                raise CacheError(
                    f"{source!r} is a plain model folder: name its repository (org/name)"
                )
            if not (root / "config.json").is_file() and not any(root.glob("*.safetensors")):
                raise CacheError(
                    f"{source!r} has neither config.json nor *.safetensors at its top: "
                    "not a model folder or a Hugging Face cache"
                )
            copy = work / "build" / repo_folder(repo_id)
            _lay_out(root, copy)
            built.append(copy)
        names = []
        for copy in built:
            _readable(copy)
            _merge(copy, hub / copy.name)
            names.append(copy.name)
    return [_repo(hub / name) for name in names]


def cache_evict(*, cache_dir: str | Path, repo_id: str) -> bool:
    """Remove a model from the cache; False when it was not there. Moved aside first, so
    new containers stop seeing it at once; running ones keep their open files."""
    if not cache_dir:
        raise CacheError("this host's agent has no Hugging Face cache (GPURENTAL_HF_CACHE_DIR)")
    hub = hub_dir(cache_dir)
    path = hub / repo_folder(repo_id)
    if not path.exists():
        return False
    aside = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=hub))
    os.replace(path, aside / path.name)
    shutil.rmtree(aside)
    return True


def modelcache_command(agent, payload: dict) -> None:
    """Carry out a control-plane request and report the outcome, then the listing."""
    action = payload.get("action")
    repo_id = str(payload.get("repo_id") or "")
    request_id = str(payload.get("request_id") or "")
    cache_dir = getattr(agent, "hf_cache_dir", "")
    import_dir = getattr(agent, "model_import_dir", "")
    reporter = agent.reporter
    try:
        if action == "fill":
            filled = cache_fill(
                cache_dir=cache_dir,
                import_dir=import_dir,
                source=str(payload.get("source") or ""),
                repo_id=repo_id,
            )
            reporter.modelcache(
                "filled", request_id=request_id, repos=[r.as_dict() for r in filled]
            )
        elif action == "evict":
            found = cache_evict(cache_dir=cache_dir, repo_id=repo_id)
            reporter.modelcache("evicted", request_id=request_id, repo_id=repo_id, found=found)
        elif action != "list":
            raise CacheError(f"unknown model cache action {action!r}")
    except (CacheError, OSError) as exc:
        reporter.modelcache("failed", request_id=request_id, repo_id=repo_id, reason=str(exc))
    try:
        listing = [r.as_dict() for r in cache_list(cache_dir)] if cache_dir else []
    except OSError as exc:
        reporter.modelcache("failed", request_id="", repo_id="", reason=f"listing: {exc}")
        return
    reporter.modelcache("listing", request_id=request_id, repos=listing)
