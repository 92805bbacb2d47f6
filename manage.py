#!/usr/bin/env python
import os
import sys
from pathlib import Path


def load_local_env() -> None:
    """Beside `make demo`, commands run as the README writes them: the demo leaves its
    settings (DEBUG=1) in var/local.env, and what the environment sets wins over them."""
    var_dir = Path(os.environ.get("GPURENTAL_VAR_DIR", Path(__file__).resolve().parent / "var"))
    env_file = var_dir / "local.env"
    if env_file.is_file():
        for line in env_file.read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key and not key.startswith("#"):
                os.environ.setdefault(key.strip(), value.strip())


def main() -> None:
    load_local_env()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
