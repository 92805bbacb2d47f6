"""API errors in the language Accept-Language asks for; the code never changes."""

import uuid

import pytest
from rest_framework.test import APIClient

from tests.api.conftest import assert_error
from tests.factories import UserFactory
from tests.i18n_api.conftest import ZH, is_chinese

URL = "/api/v1/instances/"


@pytest.fixture
def anonymous(db):
    return APIClient()


def both(request, status: int, code: str, **kwargs) -> tuple[dict, dict]:
    """The same request in English (no header) and in Chinese: the same status and code."""
    english = assert_error(request(), status, code, **kwargs)
    chinese = assert_error(request(**ZH), status, code, **kwargs)
    assert set(english["fields"]) == set(chinese["fields"])
    return english, chinese


def test_validation_error_is_chinese_with_the_same_code_and_fields(as_alice, node):
    def post(**extra):
        return as_alice.post(URL, {"gpu_model": "nope", "gpu_count": 0}, **extra)

    english, chinese = both(post, 400, "invalid")
    assert set(chinese["fields"]) == {"gpu_model", "gpu_count", "image"}
    assert "unknown GPU model 'nope'" in english["fields"]["gpu_model"][0]
    assert chinese["fields"]["gpu_model"][0].startswith("未知的 GPU 型号 'nope'")
    assert "a100" in chinese["fields"]["gpu_model"][0]  # the choices stay as they are
    # DRF's own messages come from its zh_Hans catalogue.
    assert chinese["fields"]["image"] == ["该字段是必填项。"]
    assert english["fields"]["image"] == ["This field is required."]
    assert not is_chinese(english["message"])
    assert is_chinese(chinese["message"])
    assert chinese["message"].startswith("gpu_model: ")  # field names are not translated


def test_quota_refusal_is_chinese_with_the_same_code(client_for, node, image, sent):
    dave = client_for(UserFactory(gpu_quota=1))
    assert dave.post(URL, {"gpu_model": "A100", "image": "jupyter-cpu"}).status_code == 201

    def post(**extra):
        return dave.post(URL, {"gpu_model": "A100", "image": "jupyter-cpu"}, **extra)

    english, chinese = both(post, 409, "quota_exceeded", field="gpu_count")
    assert english["message"].startswith("your quota is 1 GPUs at once and you hold 1")
    assert chinese["message"] == (
        "您的配额为同时 1 块 GPU，当前已占用 1 块；再增加 1 块将超出配额。 "
        "请停止一个实例，或申请更高的配额。"
    )
    assert chinese["fields"] == {"gpu_count": [chinese["message"]]}


def test_invalid_transition_is_chinese_with_the_same_code(as_alice, launched):
    def post(**extra):
        return as_alice.post(f"{URL}{launched.pk}/restart/", **extra)

    english, chinese = both(post, 409, "invalid_state", field="status")
    assert english["message"] == "cannot restart an instance that is pending (only when running)"
    # The status is a code (as in the API's responses); the sentence around it is Chinese.
    assert chinese["message"] == "无法重启状态为 pending 的实例（仅在 running 时可以）"


def test_not_found_is_chinese_with_the_same_code(as_alice, node):
    missing = uuid.uuid4()

    def get(**extra):
        return as_alice.get(f"{URL}{missing}/", **extra)

    english, chinese = both(get, 404, "not_found")
    assert english["message"] == f"there is no instance {missing}"
    assert chinese["message"] == f"不存在实例 {missing}"


def test_unknown_endpoint_is_chinese(as_alice):
    def get(**extra):
        return as_alice.get("/api/v1/nothing-here/", **extra)

    english, chinese = both(get, 404, "not_found")
    assert english["message"].startswith("there is no API endpoint at /api/v1/nothing-here/")
    assert chinese["message"].startswith("/api/v1/nothing-here/ 处没有 API 端点")


def test_unauthenticated_is_chinese_with_the_same_code(anonymous):
    def get(**extra):
        return anonymous.get(URL, **extra)

    english, chinese = both(get, 401, "not_authenticated")
    assert english["message"].startswith("authentication required")
    assert chinese["message"].startswith("需要认证")
    assert "Authorization: Bearer" in chinese["message"]  # the header to send stays as it is


def test_a_bad_key_is_refused_in_chinese(anonymous):
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer gpr_nope_nope")

    def get(**extra):
        return anonymous.get(URL, **extra)

    english, chinese = both(get, 401, "authentication_failed")
    assert "is not valid" in english["message"]
    assert chinese["message"] == "Authorization 请求头中的 API 密钥无效：密钥不存在、已吊销或已过期"


def test_english_is_the_default_for_other_languages(as_alice, node):
    response = as_alice.get(f"{URL}{uuid.uuid4()}/", HTTP_ACCEPT_LANGUAGE="fr-FR")
    error = assert_error(response, 404, "not_found")
    assert error["message"].startswith("there is no instance ")


def test_connect_refusal_is_chinese(as_alice, launched):
    """The gateway's refusal (its catalogue is found through LOCALE_PATHS: not an app)."""

    def post(**extra):
        return as_alice.post(f"{URL}{launched.pk}/connect/", **extra)

    english, chinese = both(post, 409, "invalid_state", field="status")
    assert english["message"].endswith("it can be opened once it is running")
    assert chinese["message"] == f"实例 {launched.pk} 的状态为 pending：运行后才能打开"
