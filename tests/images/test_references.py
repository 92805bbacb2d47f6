"""Image references as a launch names them: what is one, what is refused and why, and
which registries the operator's list admits."""

from __future__ import annotations

import pytest

from gpurental import imagerefs
from gpurental.imagerefs import BadReference, parse, registry_allowed

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest", "pull_name"),
    [
        ("python:3.11", "docker.io", "library/python", "3.11", "", "library/python"),
        ("ubuntu", "docker.io", "library/ubuntu", "latest", "", "library/ubuntu"),
        ("alice/train", "docker.io", "alice/train", "latest", "", "alice/train"),
        (
            "ghcr.io/org/team/img:v1.2",
            "ghcr.io",
            "org/team/img",
            "v1.2",
            "",
            "ghcr.io/org/team/img",
        ),
        (
            "127.0.0.1:5000/alice/jupyter:1",
            "127.0.0.1:5000",
            "alice/jupyter",
            "1",
            "",
            "127.0.0.1:5000/alice/jupyter",
        ),
        ("localhost/x", "localhost", "x", "latest", "", "localhost/x"),
        (
            f"reg.example.com/a/b@{DIGEST}",
            "reg.example.com",
            "a/b",
            "",
            DIGEST,
            "reg.example.com/a/b",
        ),
        (
            f"reg.example.com/a/b:1@{DIGEST}",
            "reg.example.com",
            "a/b",
            "1",
            DIGEST,
            "reg.example.com/a/b",
        ),
        ("a__b/c-d.e_f:TAG_1", "docker.io", "a__b/c-d.e_f", "TAG_1", "", "a__b/c-d.e_f"),
    ],
)
def test_references_docker_reads_are_read_the_same(
    text, registry, repository, tag, digest, pull_name
):
    ref = parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )
    assert ref.pull_name == pull_name
    assert ref.pull_tag == (digest or tag)


def test_a_reference_prints_as_given_with_its_default_tag():
    assert str(parse("python")) == "python:latest"
    assert str(parse("127.0.0.1:5000/alice/jupyter:1")) == "127.0.0.1:5000/alice/jupyter:1"
    assert str(parse(f"r.io/a@{DIGEST}")) == f"r.io/a@{DIGEST}"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "may not be empty"),
        ("alice/my image", "may not contain spaces"),
        ("Alice/Train", "path part 'Alice' must be lowercase"),
        ("alice//train", "path part '' must be lowercase"),
        ("alice/train:", "the tag '' must be 1 to 128"),
        ("alice/train:-x", "the tag '-x' must be"),
        ("alice/train:" + "x" * 129, "must be 1 to 128"),
        ("alice/train@sha256:abc", "64 lowercase hex digits"),
        ("alice/train@md5:" + "a" * 64, "must be sha256:"),
        ("reg_istry.io/a", "registry 'reg_istry.io' must be a host name"),
        ("reg.io:99999/a", "port must be 1 to 65535"),
        ("r.io/" + "a" * 260, "at most 255 characters"),
        ("alice/-train", "path part '-train'"),
    ],
)
def test_what_is_not_a_reference_is_refused_naming_the_rule(text, says):
    with pytest.raises(BadReference, match=None) as caught:
        parse(text)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("registry", "allowed", "admitted"),
    [
        ("ghcr.io", ["*"], True),
        ("ghcr.io", ["ghcr.io"], True),
        ("GHCR.io", ["ghcr.io"], True),
        ("docker.io", ["ghcr.io"], False),
        ("eu.reg.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("evil-example.com", ["*.example.com"], False),
        ("127.0.0.1:5000", ["127.0.0.1:5000"], True),
        ("127.0.0.1:5001", ["127.0.0.1:5000"], False),
        ("ghcr.io", [], False),
    ],
)
def test_the_operators_list_of_registries(registry, allowed, admitted):
    assert registry_allowed(registry, allowed) is admitted


def test_a_login_s_registry_is_saved_in_one_spelling():
    assert imagerefs.check_registry(" HTTPS://GHCR.io/ ") == "ghcr.io"
    assert imagerefs.check_registry("index.docker.io") == "docker.io"
    with pytest.raises(BadReference, match="host name or address"):
        imagerefs.check_registry("not a host")
