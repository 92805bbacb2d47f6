"""The platform's image registry: Debian's ``docker-registry`` (the CNCF distribution) on
127.0.0.1, storing under a folder of its own.

``make demo`` starts one beside its PostgreSQL and Redis (``embedded.run``) when the
binary is installed (``apt-get install docker-registry``); the tests start their own,
with logins (``users``), to push customers' images to and pull them from. Docker treats
a registry on 127.0.0.0/8 as insecure-allowed, so plain HTTP needs no engine setting.
Django-free, like ``embedded``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

BINARY = "docker-registry"


def available() -> bool:
    return shutil.which(BINARY) is not None


def _htpasswd(users: dict[str, str]) -> str:
    import bcrypt  # the registry reads bcrypt hashes only

    return "".join(
        f"{name}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"
        for name, password in users.items()
    )


class Registry:
    """One registry process on ``127.0.0.1:port`` (``address``), storing under ``root``."""

    def __init__(
        self,
        root: Path,
        port: int,
        *,
        users: dict[str, str] | None = None,
        token_key: Path | None = None,
    ):
        """``users``: logins (htpasswd); ``token_key``: take only tokens signed with this
        key (``registrytokens``), as the platform's registry does."""
        self.root, self.port, self.users = Path(root), port, users or {}
        self.token_key = token_key
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _config(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        lines = [
            "version: 0.1",
            "log:",
            "  level: warn",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.root / 'data'}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: {self.address}",
            "  headers:",
            "    X-Content-Type-Options: [nosniff]",
        ]
        if self.token_key is not None:
            from gpurental import registrytokens

            cert = self.root / "token-cert.pem"
            cert.write_bytes(
                registrytokens.certificate_pem(registrytokens.key_load(self.token_key))
            )
            lines += registrytokens.registry_config(cert)
        elif self.users:
            (self.root / "htpasswd").write_text(_htpasswd(self.users))
            lines += [
                "auth:",
                "  htpasswd:",
                "    realm: gpurental",
                f"    path: {self.root / 'htpasswd'}",
            ]
        config = self.root / "config.yml"
        config.write_text("\n".join(lines) + "\n")
        return config

    def answers(self) -> bool:
        try:
            urllib.request.urlopen(f"http://{self.address}/v2/", timeout=1)  # noqa: S310
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # with logins: it answers, and asks for one
        except OSError:
            return False
        return True

    def start(self, timeout_s: float = 15.0) -> Registry:
        if not available():
            raise RuntimeError(
                "docker-registry is not installed: apt-get install docker-registry "
                "(the CNCF distribution registry)"
            )
        log = open(self.root.parent / f"{self.root.name}.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(  # noqa: S603 - fixed binary, our own config
            [BINARY, "serve", str(self._config())],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"docker-registry did not start on {self.address}; "
                    f"see {self.root.parent / f'{self.root.name}.log'}"
                )
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
