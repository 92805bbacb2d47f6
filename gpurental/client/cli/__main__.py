"""``python -m gpurental.client.cli``: the ``gpurental`` command without its script."""

import sys

from gpurental.client.cli import main

sys.exit(main())
