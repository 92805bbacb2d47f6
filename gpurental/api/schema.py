"""OpenAPI: document the error shape on every operation (a drf-spectacular hook)."""

from __future__ import annotations

ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error the API answers has this shape.",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "fields"],
            "properties": {
                "code": {
                    "type": "string",
                    "description": "Machine-readable, e.g. invalid, not_found, no_capacity",
                },
                "message": {
                    "type": "string",
                    "description": "A sentence for people, naming the field and the rule",
                },
                "fields": {
                    "type": "object",
                    "description": "Messages per input field (empty when no field is at fault)",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}
HTTP_METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}


def _errors_for(path: str, method: str, operation: dict) -> dict[str, str]:
    errors = {
        "401": "Not authenticated, or the API key is unknown or revoked",
        "429": "Rate limit reached; see Retry-After",
    }
    if "{" in path:
        errors["404"] = "No such object among those you can see"
    if method in {"post", "put", "patch", "delete"}:
        errors["403"] = "Permission denied (e.g. a session request without its CSRF token)"
    if method == "post":
        errors["400"] = "Invalid input; error.fields names each field at fault"
        errors["409"] = (
            "Refused by the state of things: no_capacity, quota_exceeded, invalid_state, "
            "payments_unavailable, or idempotency_key_in_progress"
        )
        errors["422"] = "idempotency_key_reused: the Idempotency-Key was used for another request"
    elif any(p.get("in") == "query" for p in operation.get("parameters", [])):
        errors["400"] = "Invalid query parameter; error.fields names it"
    return errors


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation.setdefault("responses", {})
            for code, description in _errors_for(path, method, operation).items():
                responses.setdefault(
                    code,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": ERROR_REF}},
                    },
                )
            operation["responses"] = dict(sorted(responses.items()))
    return result
