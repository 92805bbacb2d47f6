"""Image references as Docker reads them (``registry/repo:tag`` or ``repo@sha256:…``).

Django-free, like ``protocol``: the control plane checks a launch's reference with it before anything is
held, and the agent splits the same reference for the engine's pull. The grammar is the
CNCF distribution's (``distribution/reference``): lowercase path components joined by
``/``, an optional registry first (a name with a dot or a port, or ``localhost``), then a
tag, a digest or both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"
MAX_NAME_LENGTH = 255  # the registry's own limit on a repository's full name

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_HOST = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]{1,5})?"
)
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


class BadReference(ValueError):
    """Not an image reference; the message names the part and the rule it breaks."""


@dataclass(frozen=True)
class Reference:
    registry: str  # "docker.io" when the reference names none
    repository: str  # the path on the registry, e.g. "library/python" or "alice/train"
    tag: str  # "" when only a digest is given
    digest: str  # "sha256:…" or ""
    named_registry: bool  # whether the text named its registry

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}" if self.named_registry else self.short_name
        return (
            name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
        )

    @property
    def short_name(self) -> str:
        """The name as Docker prints it: docker.io's official images without library/."""
        if self.registry == DEFAULT_REGISTRY and self.repository.startswith("library/"):
            return self.repository.removeprefix("library/")
        return self.repository if not self.named_registry else f"{self.registry}/{self.repository}"

    @property
    def pull_name(self) -> str:
        """What the engine's pull takes as the repository (its tag or digest apart)."""
        if self.named_registry:
            return f"{self.registry}/{self.repository}"
        return self.repository

    @property
    def pull_tag(self) -> str:
        """The engine's pull's tag argument: the digest when pinned, else the tag."""
        return self.digest or self.tag


def _looks_like_registry(first: str) -> bool:
    return "." in first or ":" in first or first == "localhost"


def parse(text: str) -> Reference:
    """The reference ``text`` names, with ``latest`` when it gives neither tag nor digest;
    BadReference when it is not one."""
    text = (text or "").strip()
    if not text:
        raise BadReference("an image reference may not be empty")
    if any(c.isspace() for c in text):
        raise BadReference(f"{text!r}: an image reference may not contain spaces")
    name, digest = text, ""
    if "@" in name:
        name, digest = name.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise BadReference(
                f"{text!r}: the digest after @ must be sha256: and 64 lowercase hex digits"
            )
    tag = ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise BadReference(
                f"{text!r}: the tag {tag!r} must be 1 to 128 letters, digits, '_', '.' or '-', "
                "not starting with '.' or '-'"
            )
    parts = name.split("/")
    registry, named = DEFAULT_REGISTRY, False
    if len(parts) > 1 and _looks_like_registry(parts[0]):
        registry, named = parts[0], True
        parts = parts[1:]
        if not _HOST.fullmatch(registry):
            raise BadReference(
                f"{text!r}: the registry {registry!r} must be a host name or address, "
                "with an optional :port"
            )
        if ":" in registry and not 1 <= int(registry.rsplit(":", 1)[1]) <= 65535:
            raise BadReference(f"{text!r}: the registry's port must be 1 to 65535")
    for part in parts:
        if not _COMPONENT.fullmatch(part):
            raise BadReference(
                f"{text!r}: the path part {part!r} must be lowercase letters and digits, "
                "separated by '.', '_', '__' or '-'"
            )
    if registry == DEFAULT_REGISTRY and len(parts) == 1:
        parts = ["library", *parts]
    repository = "/".join(parts)
    if len(f"{registry}/{repository}") > MAX_NAME_LENGTH:
        raise BadReference(f"{text!r}: the name may be at most {MAX_NAME_LENGTH} characters")
    if not tag and not digest:
        tag = "latest"
    return Reference(registry, repository, tag, digest, named)


def registry_allowed(registry: str, allowed: list[str] | tuple[str, ...]) -> bool:
    """Whether the operator's list admits ``registry``: a name as written (with its port),
    ``*`` for any, or ``*.example.com`` for its subdomains."""
    registry = registry.lower()
    for rule in allowed:
        rule = rule.strip().lower()
        if rule == "*" or rule == registry:
            return True
        if rule.startswith("*.") and registry.split(":")[0].endswith(rule[1:]):
            return True
    return False


def check_registry(name: str) -> str:
    """A registry's name as saved with a login (lowercase ``host[:port]``), or
    BadReference. ``docker.io``'s other spellings are the same registry."""
    name = (name or "").strip().lower().removeprefix("https://").removeprefix("http://")
    name = name.rstrip("/")
    if name in ("index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"):
        name = DEFAULT_REGISTRY
    if not name or not _HOST.fullmatch(name):
        raise BadReference(
            f"{name!r}: a registry is a host name or address with an optional :port, "
            "e.g. ghcr.io or 10.0.0.5:5000"
        )
    return name
