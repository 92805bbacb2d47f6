"""The README's useful commands run as written beside `make demo`: it leaves DEBUG=1 in
var/local.env, and manage.py reads it (without it, a command stops at the SECRET_KEY check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from gpurental.console.demo import seed_demo
from tests.stack import database_url

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]  # slow: manage.py subprocesses


def manage(*args: str, var_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    env.update(
        GPURENTAL_VAR_DIR=str(var_dir),
        DATABASE_URL=database_url(connection.settings_dict),  # the demo's database, here the test's
    )
    return subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_create_api_key_runs_as_the_readme_writes_it_beside_the_demo(tmp_path):
    seed_demo()
    bare = manage("create_api_key", "--user", "demo@example.com", var_dir=tmp_path)
    assert bare.returncode != 0 and "SECRET_KEY is not set" in bare.stderr
    (tmp_path / "local.env").write_text("# Written by make demo\nDEBUG=1\n")
    result = manage("create_api_key", "--user", "demo@example.com", var_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("gpr_")
