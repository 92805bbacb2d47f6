"""Where the API key and server URL come from: arguments, then environment, then a file.

``GPURENTAL_API_KEY`` and ``GPURENTAL_URL`` override the file, which ``gpurental login``
writes to ``~/.config/gpurental/config.json`` (``GPURENTAL_CONFIG`` names another
path) readable by its owner only, since it holds a secret.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gpurental.client.errors import GpuRentalError

DEFAULT_URL = "http://127.0.0.1:8000"
ENV_API_KEY = "GPURENTAL_API_KEY"
ENV_URL = "GPURENTAL_URL"
ENV_CONFIG = "GPURENTAL_CONFIG"


class ConfigError(GpuRentalError):
    """The saved configuration cannot be read."""


def config_path() -> Path:
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "gpurental" / "config.json"


def load_config(path: Path | None = None) -> dict[str, Any]:
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON; run `gpurental login` again") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} should hold a JSON object; run `gpurental login` again")
    return data


def save_config(data: dict[str, Any], path: Path | None = None) -> Path:
    """Write ``data`` atomically, mode 600, so the key is never readable by others."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkstemp creates the file with mode 600 before anything is written to it.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def resolve(api_key: str | None = None, base_url: str | None = None) -> tuple[str | None, str]:
    """The API key (``None`` when there is none anywhere) and the server URL to use."""
    env_key = os.environ.get(ENV_API_KEY)
    env_url = os.environ.get(ENV_URL)
    file: dict[str, Any] = {}
    if not (api_key or env_key) or not (base_url or env_url):
        file = load_config()
    key = api_key or env_key or file.get("api_key") or None
    url = base_url or env_url or file.get("url") or DEFAULT_URL
    return key, url
