"""One owner of instance state: only the lifecycle package creates an Instance or writes
its status. Checked on the source, so a new shortcut anywhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import gpurental

PACKAGE = Path(gpurental.__file__).parent
OWNER = PACKAGE / "rentals" / "services" / "lifecycle"
STATUS_NAMES = {"status", "status__in"}


def _writes(tree: ast.AST) -> list[tuple[int, str]]:
    """Places that may write an instance's status or create an instance."""
    found = []
    for node in ast.walk(tree):
        # instance.status = …, where the target's name mentions an instance
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "status"
                    and "instance" in ast.unparse(target.value).lower()
                ):
                    found.append((node.lineno, ast.unparse(target)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            method = node.func.attr
            touches_instances = "Instance" in owner or "instance" in owner.lower()
            creates = method in {"create", "bulk_create", "get_or_create", "update_or_create"}
            # Instance.objects.create(…), reservation.instances.create(…)
            if creates and ("Instance.objects" in owner or "instances" in owner):
                found.append((node.lineno, ast.unparse(node)[:80]))
            # ….update(status=…) on instances
            updates_status = method == "update" and any(
                k.arg in STATUS_NAMES for k in node.keywords
            )
            if updates_status and touches_instances:
                found.append((node.lineno, ast.unparse(node)[:80]))
            if method == "save" and touches_instances:
                for keyword in node.keywords:
                    if keyword.arg == "update_fields" and "status" in ast.unparse(keyword.value):
                        found.append((node.lineno, ast.unparse(node)[:80]))
        # lifecycle._move(…), lifecycle._lock(…): the package's private helpers
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and "lifecycle" in ast.unparse(node.value)
        ):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.ImportFrom) and "lifecycle" in (node.module or ""):
            found.extend(
                (node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("_")
            )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Instance"
        ):
            found.append((node.lineno, "Instance(…)"))
    return found


def test_no_code_outside_the_lifecycle_writes_instance_status():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if OWNER in path.parents or "migrations" in path.parts:
            continue
        for line, what in _writes(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, "instance state written outside the lifecycle:\n" + "\n".join(offenders)


def test_the_check_finds_each_kind_of_write():
    """The check itself: each shortcut it must catch, caught."""
    shortcuts = [
        "instance.status = 'running'",
        "Instance.objects.filter(pk=1).update(status='lost')",
        "Instance.objects.create(user=u, status='pending')",
        "reservation.instances.create(status='pending')",
        "instance.save(update_fields=['status'])",
        "Instance(status='pending').save()",
        "lifecycle._move(instance, 'lost', reason='', now=now)",
        "from gpurental.rentals.services.lifecycle.base import _move",
    ]
    for code in shortcuts:
        assert _writes(ast.parse(code)), code
    assert not _writes(ast.parse("host.status = 'offline'\nInvoice.objects.update(status='x')"))
