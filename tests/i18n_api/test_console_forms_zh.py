"""Console forms answer in the browser's language: labels, form errors, service refusals."""

from django.urls import reverse

from tests.factories import GPUModelFactory, PlanFactory, UserFactory
from tests.i18n_api.conftest import ZH

SIGNUP = {
    "email": "x@example.com",
    "full_name": "N",
    "company": "",
    "password1": "a-long-pass-phrase-7",
    "password2": "another-pass-phrase-8",
}


def test_signup_form_errors_and_labels_are_chinese(client, db):
    chinese = client.post(reverse("signup"), SIGNUP, **ZH).text
    assert "两次输入的密码不一致。" in chinese
    assert "再次输入密码" in chinese and "The two passwords differ." not in chinese
    english = client.post(reverse("signup"), SIGNUP).text
    assert "The two passwords differ." in english and "两次输入的密码不一致" not in english


def test_launch_form_error_and_quota_refusal_are_chinese(client, image, make_host):
    model = GPUModelFactory(short_name="L4", slug="l4")
    PlanFactory(gpu_model=model, gpu_count=1, slug="l4-x1")
    make_host("node1", model, count=2)
    client.force_login(UserFactory(gpu_quota=0))
    form = {"gpu_model": "l4", "gpu_count": 2, "image": image.slug}

    page = client.post(reverse("launch"), form, **ZH).text
    assert "L4 每个实例可选的 GPU 数量为 1。" in page
    assert "L4 is offered with" not in page

    page = client.post(reverse("launch"), {**form, "gpu_count": 1}, **ZH).text
    assert "您的配额为同时 0 块 GPU，当前已占用 0 块；再增加 1 块将超出配额。" in page

    page = client.post(reverse("launch"), form).text
    assert "L4 is offered with 1 GPUs per instance." in page
