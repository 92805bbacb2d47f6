"""The Python side of "CI fails when a user-visible string is not marked for translation":
the messages customers read from Python code (refusals raised by the services, the API's
errors, the console's messages-framework texts) are gettext calls, never bare literals
or f-strings. Staff-only, agent-side and log texts are not looked at."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gpurental"

# Exceptions whose message a customer reads (the API's error "message", a form error).
CUSTOMER_ERRORS = {
    "RentalError",
    "NoCapacity",
    "QuotaExceeded",
    "InvalidTransition",
    "InsufficientBalance",
    "SpecError",
    "TeamRefused",
    "RoleTooLow",
    "ApiKeyRefused",
    "SSHKeyRefused",
    "VoucherRefused",
    "PaymentRefused",
    "AutoTopUpRefused",
    "WebhookRefused",
    "CacheRefused",
    "ValidationError",
    "NotFound",
    "PermissionDenied",
    "AuthenticationFailed",
    "TooMany",
    "IdempotencyKeyInvalid",
    "IdempotencyKeyReused",
    "IdempotencyKeyInProgress",
}
MESSAGE_CALLS = {"success", "error", "info", "warning"}
# Where customers never look: the host agent, the SDK/CLI (English by design, a program's
# output), staff pages and admin, management commands, tests' helpers.
SKIPPED = ("agent/", "client/", "testing/", "acceptance/", "fleet/", "telemetry/")
# Answers to a payment provider's webhook, read by its dashboard, not by a customer.
SKIPPED += ("billing/payments/",)
SKIPPED_FILES = {"admin.py", "admin_credit.py", "admin_mixins.py", "protocol.py"}
# Staff-only functions inside customer modules: (file, function).
STAFF_FUNCTIONS = {
    ("console/views.py", "fleet_host_action"),
    ("console/views.py", "fleet_instance_stop"),
    ("console/views.py", "revenue_csv"),
    ("baremetal/services.py", "baremetal_host_set"),
    ("baremetal/services.py", "bmc_for"),
    ("baremetal/services.py", "host_power"),
    ("modelcache/services.py", "_needs_cache"),  # the operator fills and evicts caches
    ("modelcache/services.py", "cache_fill_request"),
    ("modelcache/services.py", "cache_evict_request"),
    ("billing/services/invoicing.py", "*"),  # invoices are issued and credited by staff
    ("catalog/models.py", "*"),  # the admin's model validation
}


def _is_bare_text(node) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(ch.isalpha() for ch in node.value)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod):  # _("... %(x)s") % {...}: the values are data
            return _is_bare_text(node.left)
        return _is_bare_text(node.left) or _is_bare_text(node.right)
    if isinstance(node, ast.Dict):
        return any(_is_bare_text(v) for v in node.values)
    if isinstance(node, ast.List | ast.Tuple):
        return any(_is_bare_text(v) for v in node.elts)
    return False


def _name(func) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _problems(path: Path, rel: str | None = None) -> list[str]:
    rel = rel or path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), filename=str(path))
    staff = {f for (file, f) in STAFF_FUNCTIONS if file == rel}
    if "*" in staff:
        return []
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and function.name in staff:
            function.body = []  # not looked at
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = _name(node.func)
        is_message = (
            name in MESSAGE_CALLS
            and isinstance(node.func, ast.Attribute)
            and _name(node.func.value) == "messages"
        )
        first = node.args[1] if is_message and len(node.args) > 1 else node.args[0]
        if (name in CUSTOMER_ERRORS or is_message) and _is_bare_text(first):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(first)[:90]}")
    return found


def test_customer_messages_in_python_are_marked_for_translation():
    files = [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if "migrations" not in p.parts
        and p.name not in SKIPPED_FILES
        and not p.relative_to(ROOT).as_posix().startswith(SKIPPED)
        and "management" not in p.parts
    ]
    problems = [problem for path in files for problem in _problems(path)]
    assert not problems, "not marked for translation:\n" + "\n".join(problems)


def test_the_check_finds_a_bare_refusal(tmp_path):
    # The check itself can fail: an f-string refusal and a bare messages text are found.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(x, request):\n"
        "    messages.success(request, 'Saved.')\n"
        "    messages.success(request, _('Saved.'))\n"
        "    raise RentalError(f'no {x} free', field='x')\n"
    )
    assert len(_problems(sample, rel="rentals/sample.py")) == 2
