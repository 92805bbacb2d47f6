"""The few calls the control plane makes to a registry's HTTP API (the CNCF distribution's
``/v2/``): deleting a saved image's manifest. Plain HTTP on 127.0.0.0/8, HTTPS elsewhere.
``auth`` is a login ({"username", "password"}) or a token ({"registrytoken"})."""

from __future__ import annotations

import requests

from gpurental import imagerefs


class RegistryError(Exception):
    pass


def _base(registry: str) -> str:
    host = registry.split(":")[0]
    scheme = "http" if host.startswith("127.") or host == "localhost" else "https"
    return f"{scheme}://{registry}"


def _auth(auth: dict | None) -> dict:
    if not auth:
        return {}
    if auth.get("registrytoken"):
        return {"headers": {"Authorization": f"Bearer {auth['registrytoken']}"}}
    return {"auth": (auth["username"], auth["password"])}


def manifest_delete(reference: str, digest: str, auth: dict | None, timeout: float = 10) -> None:
    ref = imagerefs.parse(reference)
    url = f"{_base(ref.registry)}/v2/{ref.repository}/manifests/{digest}"
    try:
        response = requests.delete(url, timeout=timeout, **_auth(auth))
    except requests.RequestException as exc:
        raise RegistryError(f"{ref.registry} does not answer ({exc})") from exc
    if response.status_code not in (202, 404):  # 404: gone already
        raise RegistryError(
            f"{ref.registry} answered {response.status_code}: {response.text[:200]}"
        )


def manifest_exists(reference: str, auth: dict | None, timeout: float = 10) -> bool:
    ref = imagerefs.parse(reference)
    url = f"{_base(ref.registry)}/v2/{ref.repository}/manifests/{ref.pull_tag}"
    accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
    kwargs = _auth(auth)
    kwargs["headers"] = {**kwargs.get("headers", {}), **accept}
    response = requests.head(url, timeout=timeout, **kwargs)
    return response.status_code == 200
