"""The OpenAPI schema and its Swagger UI, served without any CDN."""

import json
import re

from django.contrib.staticfiles import finders
from django.core.management import call_command

EXPECTED_OPERATIONS = {
    ("get", "/api/v1/gpu-models/"),
    ("get", "/api/v1/gpu-models/{slug}/"),
    ("get", "/api/v1/plans/"),
    ("get", "/api/v1/plans/{slug}/"),
    ("get", "/api/v1/images/"),
    ("get", "/api/v1/images/{slug}/"),
    ("get", "/api/v1/instances/"),
    ("post", "/api/v1/instances/"),
    ("post", "/api/v1/instances/cluster/"),
    ("get", "/api/v1/instances/{id}/"),
    ("post", "/api/v1/instances/{id}/stop/"),
    ("post", "/api/v1/instances/{id}/start/"),
    ("post", "/api/v1/instances/{id}/restart/"),
    ("post", "/api/v1/instances/{id}/terminate/"),
    ("post", "/api/v1/instances/{id}/idle-policy/"),
    ("post", "/api/v1/instances/{id}/auto-recover/"),
    ("post", "/api/v1/instances/{id}/connect/"),
    ("get", "/api/v1/api-keys/"),
    ("post", "/api/v1/api-keys/"),
    ("get", "/api/v1/api-keys/{id}/"),
    ("delete", "/api/v1/api-keys/{id}/"),
    ("get", "/api/v1/teams/"),
    ("post", "/api/v1/teams/"),
    ("get", "/api/v1/teams/{slug}/"),
    ("get", "/api/v1/teams/{slug}/members/"),
    ("patch", "/api/v1/teams/{slug}/members/{member}/"),
    ("delete", "/api/v1/teams/{slug}/members/{member}/"),
    ("post", "/api/v1/teams/{slug}/leave/"),
    ("get", "/api/v1/teams/{slug}/invitations/"),
    ("post", "/api/v1/teams/{slug}/invitations/"),
    ("delete", "/api/v1/teams/{slug}/invitations/{invitation}/"),
    ("get", "/api/v1/ssh-keys/"),
    ("post", "/api/v1/ssh-keys/"),
    ("get", "/api/v1/ssh-keys/{id}/"),
    ("delete", "/api/v1/ssh-keys/{id}/"),
    ("get", "/api/v1/registry-logins/"),
    ("post", "/api/v1/registry-logins/"),
    ("get", "/api/v1/registry-logins/{id}/"),
    ("delete", "/api/v1/registry-logins/{id}/"),
    ("post", "/api/v1/instances/{id}/save-image/"),
    ("get", "/api/v1/saved-images/"),
    ("get", "/api/v1/saved-images/{id}/"),
    ("delete", "/api/v1/saved-images/{id}/"),
    ("get", "/api/v1/volumes/"),
    ("post", "/api/v1/volumes/"),
    ("get", "/api/v1/volumes/{id}/"),
    ("delete", "/api/v1/volumes/{id}/"),
    ("post", "/api/v1/volumes/{id}/detach/"),
    ("post", "/api/v1/volumes/{id}/resize/"),
    ("get", "/api/v1/snapshots/"),
    ("post", "/api/v1/snapshots/"),
    ("get", "/api/v1/snapshots/{id}/"),
    ("delete", "/api/v1/snapshots/{id}/"),
    ("post", "/api/v1/snapshots/{id}/restore/"),
    ("get", "/api/v1/me/"),
    ("post", "/api/v1/me/log-out-everywhere/"),
    ("get", "/api/v1/reservations/"),
    ("post", "/api/v1/reservations/"),
    ("get", "/api/v1/reservations/quote/"),
    ("get", "/api/v1/reservations/{id}/"),
    ("post", "/api/v1/reservations/{id}/cancel/"),
    ("post", "/api/v1/reservations/{id}/relaunch/"),
    ("get", "/api/v1/availability/"),
    ("get", "/api/v1/usage/"),
    ("get", "/api/v1/usage/csv/"),
    ("get", "/api/v1/invoices/"),
    ("get", "/api/v1/invoices/{id}/"),
    ("get", "/api/v1/invoices/{id}/pdf/"),
    ("get", "/api/v1/invoices/{id}/csv/"),
    ("get", "/api/v1/groups/"),
    ("post", "/api/v1/groups/apply/"),
    ("post", "/api/v1/groups/quote/"),
    ("post", "/api/v1/groups/{id}/rotate-endpoint-key/"),
    ("get", "/api/v1/groups/{id}/"),
    ("delete", "/api/v1/groups/{id}/"),
    ("get", "/api/v1/groups/{id}/events/"),
    ("get", "/api/v1/webhooks/"),
    ("post", "/api/v1/webhooks/"),
    ("get", "/api/v1/webhooks/{id}/"),
    ("patch", "/api/v1/webhooks/{id}/"),
    ("delete", "/api/v1/webhooks/{id}/"),
    ("post", "/api/v1/webhooks/{id}/reenable/"),
    ("get", "/api/v1/webhook-deliveries/"),
    ("get", "/api/v1/webhook-deliveries/{id}/"),
    ("post", "/api/v1/webhook-deliveries/{id}/resend/"),
    ("get", "/api/v1/notifications/"),
    ("get", "/api/v1/notification-preferences/"),
    ("get", "/api/v1/notification-preferences/{event}/"),
    ("patch", "/api/v1/notification-preferences/{event}/"),
    ("get", "/api/v1/payments/"),
    ("post", "/api/v1/payments/"),
    ("get", "/api/v1/payments/{id}/"),
    ("post", "/api/v1/vouchers/redeem/"),
    ("get", "/api/v1/auto-topup/"),
    ("put", "/api/v1/auto-topup/"),
    ("post", "/api/v1/auto-topup/card/"),
    ("delete", "/api/v1/auto-topup/card/"),
    ("get", "/api/v1/dedicated-plans/"),
    ("get", "/api/v1/dedicated-plans/{slug}/"),
    ("get", "/api/v1/leases/"),
    ("post", "/api/v1/leases/"),
    ("get", "/api/v1/leases/{id}/"),
    ("post", "/api/v1/leases/{id}/launch/"),
    ("post", "/api/v1/leases/{id}/end/"),
    ("post", "/api/v1/leases/{id}/cancel/"),
}


def test_schema_is_valid_openapi_without_warnings(db, tmp_path):
    out = tmp_path / "schema.json"
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json",
                 "--file", str(out))  # fmt: skip
    schema = json.loads(out.read_text())
    operations = {(method, path) for path, item in schema["paths"].items() for method in item}
    assert operations == EXPECTED_OPERATIONS


def test_schema_documents_auth_errors_and_idempotency(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert schema["components"]["securitySchemes"]["apiKey"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "gpr_<prefix>_<secret>",
        "description": "An API key from the console or POST /api/v1/api-keys/.",
    }
    assert "Error" in schema["components"]["schemas"]
    launch = schema["paths"]["/api/v1/instances/"]["post"]
    assert {"400", "401", "409", "422", "429"} <= set(launch["responses"])
    assert "Idempotency-Key" in [p["name"] for p in launch["parameters"]]
    plan = schema["components"]["schemas"]["Plan"]["properties"]
    assert plan["hourly_rate"]["type"] == "string" and plan["hourly_rate"]["format"] == "decimal"
    assert "jupyter_token" not in json.dumps(schema)


def test_swagger_ui_is_served_from_our_static_files(client, db):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "an inline script: CSP blocks it"
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any("swagger-ui-bundle.js" in a for a in assets)
    (start,) = [a for a in assets if a.startswith("/api/docs/")]  # its start-up script
    assert "/api/schema/" in client.get(start).content.decode()
    for asset in assets:
        if asset == start:
            continue
        assert asset.startswith("/static/"), f"{asset} is not served locally"
        assert finders.find(asset.removeprefix("/static/")), f"{asset} is missing"
    assert "cdn" not in html.lower() and "unpkg" not in html.lower()
