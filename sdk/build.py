"""Builds the gpurental-client wheel (the SDK and CLI alone) from this repository.

    .venv/bin/python sdk/build.py [--dist DIR]     # or: make client-dist

gpurental/client/ is staged, as it is, with gpurental/__init__.py (the version) and
sdk/pyproject.toml in a temporary folder, and pip builds the wheel from there: the
source is never copied into the repository, and nothing of the server gets in.
Prints the wheel's path.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parent
ROOT = SDK.parent
PACKAGE = ROOT / "gpurental"


def version() -> str:
    match = re.search(r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text(), re.M)
    if not match:
        raise SystemExit(f"no __version__ in {PACKAGE / '__init__.py'}")
    return match.group(1)


def stage(into: Path) -> None:
    shutil.copy2(SDK / "pyproject.toml", into / "pyproject.toml")
    shutil.copy2(SDK / "README.md", into / "README.md")
    (into / "gpurental").mkdir()
    shutil.copy2(PACKAGE / "__init__.py", into / "gpurental" / "__init__.py")
    shutil.copytree(
        PACKAGE / "client",
        into / "gpurental" / "client",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    shutil.copytree(
        SDK / "cloud_gpu", into / "cloud_gpu", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )


def build(dist: Path) -> Path:
    dist = dist.resolve()
    dist.mkdir(parents=True, exist_ok=True)
    wheel = dist / f"gpurental_client-{version()}-py3-none-any.whl"
    wheel.unlink(missing_ok=True)  # never report a stale wheel as this build's
    with tempfile.TemporaryDirectory(prefix="gpurental-client-") as tmp:
        staging = Path(tmp)
        stage(staging)
        # An isolated build: pip installs setuptools for it from the configured index.
        subprocess.run(  # noqa: S603 - this interpreter's pip, our own arguments
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet"]
            + ["--wheel-dir", str(dist), str(staging)],
            check=True,
        )
    if not wheel.is_file():
        raise SystemExit(f"pip built no {wheel.name} in {dist}")
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="default: dist/")
    print(build(parser.parse_args().dist))


if __name__ == "__main__":
    main()
