"""Which tests of an earlier list are gone from a later one (issue 28: the count never goes
down, and a test that disappears is replaced by one named in the commit message).

    .venv/bin/python -m pytest --collect-only -q | grep :: | sort > after.txt
    .venv/bin/python scripts/compare_test_ids.py bench/test-ids/6196c45.txt after.txt

A test is matched by its name and parameters, not its file, so a test that moved to
another file (tests/api/ per resource) still counts as kept. Exits 1 when any is gone.
"""

from __future__ import annotations

import sys
from collections import Counter


def names(path: str) -> Counter:
    with open(path) as lines:
        ids = [line.strip() for line in lines if "::" in line]
    return Counter(test_id.split("::", 1)[1] for test_id in ids)


def main(before_path: str, after_path: str) -> int:
    before, after = names(before_path), names(after_path)
    gone = sorted(name for name, count in before.items() if after[name] < count)
    print(f"{sum(before.values())} tests before, {sum(after.values())} after, {len(gone)} gone")
    for name in gone:
        print(f"  gone: {name}")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
