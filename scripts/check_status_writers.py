"""One writer per status: fail, naming file:line, where code other than a status's owner
writes ``Instance.status`` or ``Host.status``. Run by ``make lint``.

Owners (docs/ARCHITECTURE.md, "State machines"):

- ``Instance.status``: ``gpurental/rentals/services/lifecycle/`` (the instance lifecycle);
- ``Host.status``: ``gpurental/fleet/lifecycle.py`` (fleet's host transitions).

Everyone else calls their named transitions.

What counts as a write (read from the source with ``ast``, nothing is imported or run):

- an assignment to ``<x>.status`` (``=``, ``+=``, annotated), or ``setattr(<x>, "status", …)``;
- ``<queryset>.update(status=…)``, however the queryset was built (``filter``, ``exclude``…);
- ``<x>.save(update_fields=[…"status"…])`` and ``bulk_update(…, ["status", …])``.

How ``<x>`` or ``<queryset>`` is taken to be an Instance or a Host (a heuristic: Python has
no types at this point). Trailing queryset calls are stripped (``.filter(…)``,
``.select_for_update()``…) and the last name left decides:

1. ``Instance.objects…`` / ``Host.objects…`` (or ``_default_manager``): that model;
2. a name bound in the same function, or at module level, to that model: a parameter
   annotated ``Instance``/``Host`` (also ``Instance | None``, quoted), or assigned or looped
   over from an expression that rule 1 recognises or from ``Instance(…)``/``Host(…)``;
3. otherwise the name itself: ``instance``, ``instances``, ``replica``, ``replicas`` or any
   name containing ``instance`` (``self.instance``, ``old_instance``) is an Instance;
   ``host``, ``hosts`` or a name with ``host`` as a ``_``-separated word (``run.host``,
   ``cache_host``) is a Host. Related managers follow the same rule (``host.instances``).

So ``reservation.status = …``, ``invoice.status = …``, ``fields.update(status=…)`` on a dict,
or the generic ``row.status = to`` of ``rentals/services/transitions.py`` are not flagged,
and an Instance bound to a name like ``obj`` is caught only when rule 2 sees its binding.
Not seen: a field name that is not a literal (``setattr(x, key, …)``,
``save(update_fields=fields)``), writes through raw SQL, and creation (``Instance.objects
.create(status=…)``: creating is not a transition; ``tests/rentals/test_state_owner.py``
holds instance creation to the lifecycle). ``gpurental/agent`` and ``gpurental/client`` are
not read: they import no Django app (import-linter's contract), and their own ``Instance``
classes are the SDK's. Migrations are not read either.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpurental"
MODELS = ("Instance", "Host")
OWNERS = {
    "Instance": "gpurental/rentals/services/lifecycle/",
    "Host": "gpurental/fleet/lifecycle.py",
}
SKIPPED = ("gpurental/agent/", "gpurental/client/")
NAMES = {
    "Instance": re.compile(r"instance|^replicas?$", re.IGNORECASE),
    "Host": re.compile(r"(^|_)hosts?($|_)", re.IGNORECASE),
}
# Calls that keep a queryset a queryset of the same model.
QUERYSET_CALLS = {
    "all",
    "filter",
    "exclude",
    "select_for_update",
    "select_related",
    "prefetch_related",
    "only",
    "defer",
    "order_by",
    "distinct",
    "using",
    "annotate",
    "alias",
}
MANAGERS = {"objects", "_default_manager"}


def _model_in_annotation(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
    for model in MODELS:
        if re.search(rf"\b{model}\b", str(text)):
            return model
    return None


def _strip(node: ast.AST) -> ast.AST:
    """``host.instances.filter(x).select_for_update()`` → ``host.instances``."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in QUERYSET_CALLS
    ):
        node = node.func.value
    if isinstance(node, ast.Subscript):  # qs[:10]
        return _strip(node.value)
    return node


def _manager_model(node: ast.AST) -> str | None:
    """``Instance.objects…`` anywhere down the chain (rule 1)."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and sub.attr in MANAGERS
            and isinstance(sub.value, ast.Name)
            and sub.value.id in MODELS
        ):
            return sub.value.id
    return None


def _bound_model(value: ast.AST) -> str | None:
    """The model an assigned value is an object or queryset of, when rule 1 or a
    constructor call says so."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in MODELS:
        return value.func.id
    return _manager_model(value)


def _bindings(scope: ast.AST) -> dict[str, str]:
    """Names bound to an Instance or a Host in ``scope`` (rule 2), nested functions apart."""
    bound: dict[str, str] = {}
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        args = scope.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if model := _model_in_annotation(arg.annotation):
                bound[arg.arg] = model
    for node in _own_nodes(scope):
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
            model = _model_in_annotation(node.annotation)
            if model and isinstance(node.target, ast.Name):
                bound[node.target.id] = model
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            targets, value = [node.target], node.iter
        if value is None:
            continue
        model = _bound_model(value)
        if model is None:
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                bound[target.id] = model
    return bound


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside the functions and classes nested in it."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _own_nodes(child)


def _last_name(node: ast.AST) -> str | None:
    node = _strip(node)
    if isinstance(node, ast.Attribute):
        if node.attr in MANAGERS and isinstance(node.value, ast.Name):
            return node.value.id
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def model_of(node: ast.AST, bound: dict[str, str]) -> str | None:
    """Instance, Host or None for the object or queryset ``node`` (rules 1 to 3)."""
    stripped = _strip(node)
    if model := _manager_model(stripped):
        return model
    name = _last_name(stripped)
    if name is None:
        return None
    if name in MODELS:
        return name
    if isinstance(stripped, ast.Name) and name in bound:
        return bound[name]
    for model, pattern in NAMES.items():
        if pattern.search(name):
            return model
    return None


def _names_status(node: ast.AST) -> bool:
    return any(_is_status(sub) for sub in ast.walk(node))


def _flat(targets: list[ast.AST]) -> Iterator[ast.AST]:
    """``a, b.status = …``: each target."""
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            yield from _flat(target.elts)
        elif isinstance(target, ast.Starred):
            yield from _flat([target.value])
        else:
            yield target


def _candidates(node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """(the object or queryset written, how) for each status write ``node`` makes, whatever
    its model."""
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in _flat(targets):
            if isinstance(target, ast.Attribute) and target.attr == "status":
                yield target.value, f"{ast.unparse(target)} = …"
        return
    if not isinstance(node, ast.Call):
        return
    func = node.func
    if isinstance(func, ast.Name):
        args = node.args
        if func.id == "setattr" and len(args) >= 2 and _is_status(args[1]):
            yield args[0], f'setattr({ast.unparse(args[0])}, "status", …)'
        return
    if not isinstance(func, ast.Attribute):
        return
    receiver = ast.unparse(func.value)
    if func.attr == "update" and any(k.arg == "status" for k in node.keywords):
        yield func.value, f"{receiver}.update(status=…)"
    elif func.attr == "save" and any(
        k.arg == "update_fields" and _names_status(k.value) for k in node.keywords
    ):
        yield func.value, f"{receiver}.save(update_fields=[…'status'…])"
    elif func.attr == "bulk_update":
        fields = node.args[1:2] + [k.value for k in node.keywords if k.arg == "fields"]
        if any(_names_status(f) for f in fields):
            yield func.value, f"{receiver}.bulk_update(…'status'…)"
            if node.args:  # the objects updated: bulk_update(instances, […])
                yield node.args[0], f"{receiver}.bulk_update(…'status'…)"


def _is_status(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "status"


def _writes_in(scope: ast.AST, bound: dict[str, str]) -> Iterator[tuple[int, str, str]]:
    for node in _own_nodes(scope):
        for written, what in _candidates(node):
            if model := model_of(written, bound):
                yield node.lineno, model, what
                break  # one finding per statement


def status_writes(source: str, filename: str = "<source>") -> list[tuple[int, str, str]]:
    """(line, model, what) for each write of Instance.status or Host.status in ``source``."""
    tree = ast.parse(source, filename=filename)
    module_bound = _bindings(tree)
    found = list(_writes_in(tree, module_bound))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound = {**module_bound, **_bindings(node)}
            found.extend(_writes_in(node, bound))
    return sorted(set(found))


def offenders(paths: list[Path]) -> list[str]:
    lines = []
    for path in paths:
        rel = path.resolve().relative_to(ROOT).as_posix()
        if rel.startswith(SKIPPED) or "/migrations/" in rel:
            continue
        for line, model, what in status_writes(path.read_text(), filename=rel):
            owner = OWNERS[model]
            if rel == owner or (owner.endswith("/") and rel.startswith(owner)):
                continue
            lines.append(
                f"{rel}:{line}: {model}.status written ({what}); only {owner} may: "
                "call its named transitions"
            )
    return lines


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(PACKAGE.rglob("*.py"))
    found = offenders([p for p in paths if p.suffix == ".py"])
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} status write(s) outside their owner (scripts/check_status_writers.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
