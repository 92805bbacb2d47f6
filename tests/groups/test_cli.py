# ruff: noqa: F401, F811 - pytest fixtures imported from tests.groups.surfaces
"""``gpurental group …`` and the SDK's group methods against the real API on a live server
(pytest-django's ``live_server``: the slow tier); refusals that need no server run fast."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from gpurental.accounts.services import api_key_create
from gpurental.client import Client, ValidationError, cli
from gpurental.client.groups import Group, format_of, spec_body
from gpurental.groups.models import Group as GroupRow
from tests.groups.surfaces import (
    ARTICLE_HCL,
    SPEC,
    SPEC_JSON,
    SPEC_YAML,
    a10,
    group_catalog,
    serving_echo,
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def logged_in(live_server, alice, group_catalog, monkeypatch, settings):
    settings.BILLING_CURRENCY = "USD"
    _, key = api_key_create(user=alice, name="cli")
    monkeypatch.setenv("GPURENTAL_API_KEY", key)
    monkeypatch.setenv("GPURENTAL_URL", live_server.url)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return live_server.url, key


@pytest.fixture
def spec_files(tmp_path):
    files = {
        "json": tmp_path / "group.json",
        "yaml": tmp_path / "group.yaml",
        "yml": tmp_path / "group.yml",
        "hcl": tmp_path / "group.hcl",
        "tf": tmp_path / "main.tf",
    }
    files["json"].write_text(SPEC_JSON)
    files["yaml"].write_text(SPEC_YAML)
    files["yml"].write_text(SPEC_YAML)
    files["hcl"].write_text(ARTICLE_HCL)
    files["tf"].write_text(ARTICLE_HCL)
    return files


@pytest.mark.parametrize("kind", ["json", "yaml", "yml", "hcl", "tf"])
def test_apply_from_a_file_creates_then_is_unchanged(logged_in, spec_files, capsys, kind):
    code, out, err = run(capsys, "group", "apply", str(spec_files[kind]))

    assert code == 0, err
    group = GroupRow.objects.get()
    assert f"group inference created: {group.pk}" in out
    assert f"endpoint: https://grp-{group.pk}.gw.localhost" in out
    key = out.split("endpoint key (shown once, keep it): ")[1].split()[0]
    assert key.startswith("gpg_")
    assert "warm pool (2): 0.00 USD/h" in out and "1.1000 USD/h" in out

    # Any other format of the same spec: nothing to change, and the key is not shown again.
    other = spec_files["yaml" if kind != "yaml" else "hcl"]
    code, out, err = run(capsys, "group", "apply", str(other))
    assert (code, out) == (0, "group inference unchanged\n"), err


def test_apply_shows_exactly_what_changed(logged_in, spec_files, capsys, tmp_path):
    run(capsys, "group", "apply", str(spec_files["hcl"]))
    changed = tmp_path / "changed.hcl"
    changed.write_text(ARTICLE_HCL.replace("max_nodes     = 10", "max_nodes     = 6"))

    code, out, _ = run(capsys, "group", "apply", str(changed))

    assert (code, out) == (0, "group inference changed:\n  max_nodes: 10 → 6\n")


def test_apply_from_stdin_with_format_and_json_output(logged_in, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(ARTICLE_HCL))

    code, out, err = run(capsys, "--json", "group", "apply", "-", "--format", "hcl")

    assert code == 0, err
    body = json.loads(out)
    assert body["created"] is True and body["endpoint_key"].startswith("gpg_")


def test_a_bad_spec_is_a_usage_error_naming_the_field(logged_in, capsys, tmp_path):
    bad = tmp_path / "bad.hcl"
    bad.write_text(ARTICLE_HCL.replace('instance_type = "A10"', 'instance_type = "Z9"'))

    code, out, err = run(capsys, "group", "apply", str(bad))

    assert code == 2 and out == ""
    assert "instance_type" in err and "one of: A10" in err
    assert GroupRow.objects.count() == 0


def test_quote_ls_show_and_delete(logged_in, spec_files, capsys):
    code, out, _ = run(capsys, "group", "quote", str(spec_files["hcl"]))
    assert code == 0 and out.startswith("would create group inference: 1–10 × 1 A10")
    assert GroupRow.objects.count() == 0

    run(capsys, "group", "apply", str(spec_files["hcl"]))
    group = GroupRow.objects.get()
    code, out, _ = run(capsys, "group", "ls")
    assert code == 0 and str(group.pk) in out and "1x A10" in out
    code, out, _ = run(capsys, "group", "show", "inference")
    assert code == 0 and f"group inference ({group.pk}): active" in out
    assert "no replicas" in out and "created: 1–10 × 1 A10" in out
    code, out, _ = run(capsys, "--json", "group", "show", str(group.pk))
    assert json.loads(out)["id"] == str(group.pk)

    # A new endpoint key: the old one stops now, or keeps working for the overlap.
    code, out, _ = run(capsys, "group", "rotate-key", "inference", "--overlap", "0")
    assert code == 0 and "the previous key stopped working now" in out
    new_key = out.split("keep it): ")[1].split()[0]
    group.refresh_from_db()
    assert group.endpoint_key_hash == hashlib.sha256(new_key.encode()).hexdigest()
    assert group.previous_key_hash == ""
    code, out, _ = run(capsys, "--json", "group", "rotate-key", "inference", "--overlap", "600")
    rotated = json.loads(out)
    group.refresh_from_db()
    assert group.endpoint_key_hash == hashlib.sha256(rotated["endpoint_key"].encode()).hexdigest()
    assert group.previous_key_hash == hashlib.sha256(new_key.encode()).hexdigest()
    assert rotated["previous_key_until"] == group.previous_key_until.isoformat()
    code, _, err = run(capsys, "group", "rotate-key", "inference", "--overlap", "-5")
    assert code != 0 and "overlap_s" in err

    code, out, err = run(capsys, "group", "delete", "inference")
    assert code == 2 and "pass --yes" in err  # no terminal to ask on
    code, out, _ = run(capsys, "group", "delete", "inference", "--yes")
    assert code == 0 and out == f"group inference ({group.pk}): deleted\n"
    code, _, err = run(capsys, "group", "show", "inference")
    assert code == 4 and "no group named 'inference'" in err


def test_the_sdk_creates_lists_gets_quotes_and_deletes(logged_in):
    url, key = logged_in
    client = Client(api_key=key, base_url=url)

    quote = client.quote_group(SPEC)
    group = client.create_group(ARTICLE_HCL, format="hcl")
    again = client.apply_group(SPEC)

    assert quote["price"]["warm_replica_hourly_rate"] == "0.00"
    assert isinstance(group, Group) and group.created and group.endpoint_key
    assert again.changes == [] and again.endpoint_key is None and again.id == group.id
    assert [g.id for g in client.list_groups()] == [group.id]
    fetched = client.get_group(group.id)
    assert fetched.instance_type == "A10" and fetched.events[0].kind == "applied"
    assert [e.kind for e in fetched.list_events()] == ["applied"]
    rotated = client.rotate_group_endpoint_key(group.id, overlap_s=60)
    assert rotated.endpoint_key.startswith("gpg_") and rotated.endpoint_key != group.endpoint_key
    assert rotated.previous_key_until is not None
    assert (
        GroupRow.objects.get(pk=group.id).previous_key_hash
        == hashlib.sha256(group.endpoint_key.encode()).hexdigest()
    )
    with pytest.raises(ValidationError) as caught:
        client.apply_group({**SPEC, "min_nodes": 11})
    assert "min_nodes" in caught.value.fields
    assert client.delete_group(group.id).status == "deleted"


# --- no server needed ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("g.json", "json"), ("g.YAML", "yaml"), ("g.yml", "yaml"), ("g.hcl", "hcl"),
     ("main.tf", "hcl"), ("g.txt", None)],
)  # fmt: skip
def test_the_format_comes_from_the_file_name(name, fmt):
    assert format_of(name) == fmt


def test_a_text_spec_is_sent_as_source_and_a_dict_as_it_is():
    assert spec_body(SPEC) == SPEC
    assert spec_body(ARTICLE_HCL, "hcl") == {"source": ARTICLE_HCL, "format": "hcl"}
    with pytest.raises(ValueError, match="format is one of"):
        spec_body("x", "toml")


def test_a_file_of_unknown_format_is_refused_before_any_request(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GPURENTAL_API_KEY", "gpr_unused")
    monkeypatch.setenv("GPURENTAL_URL", "http://127.0.0.1:9")  # nothing listens there
    spec = tmp_path / "group.txt"
    spec.write_text(ARTICLE_HCL)

    code, out, err = run(capsys, "group", "apply", str(spec))

    assert code == 2 and out == ""
    assert "cannot tell the format" in err and "--format" in err
    code, _, err = run(capsys, "group", "apply", str(tmp_path / "missing.hcl"))
    assert code == 2 and "cannot read" in err
