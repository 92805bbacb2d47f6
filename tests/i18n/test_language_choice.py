"""Which language a page is in: the user's saved choice, then the switcher's cookie,
then the browser's Accept-Language, else English."""

import json

from django.conf import settings

ZH = "zh-hans"
NAV_ZH, NAV_EN = "退出登录", "Log out"


def _dashboard(client, **headers):
    return client.get("/dashboard/", headers=headers).text


def test_english_is_the_default_without_any_preference(client, alice):
    client.force_login(alice)
    page = _dashboard(client)
    assert NAV_EN in page and NAV_ZH not in page
    assert '<html lang="en">' in page


def test_accept_language_zh_hans_gives_a_chinese_page(client, alice):
    client.force_login(alice)
    page = _dashboard(client, accept_language="zh-CN,zh;q=0.9,en;q=0.5")
    assert NAV_ZH in page and NAV_EN not in page
    assert '<html lang="zh-hans">' in page


def test_the_switcher_cookie_beats_accept_language_for_a_visitor(client, db):
    response = client.post("/language/", {"language": ZH, "next": "/login/"})
    assert response.status_code == 302 and response.url == "/login/"
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == ZH
    page = client.get("/login/", headers={"accept_language": "en-US,en;q=0.9"}).text
    assert '<html lang="zh-hans">' in page and ">注册</a>" in page


def test_a_users_saved_choice_beats_cookie_and_browser(client, alice):
    alice.language = ZH
    alice.save(update_fields=["language"])
    client.force_login(alice)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "en"
    assert NAV_ZH in _dashboard(client, accept_language="en-US,en;q=0.9")


def test_an_empty_choice_follows_the_browser(client, alice):
    alice.language = ""
    alice.save(update_fields=["language"])
    client.force_login(alice)
    assert NAV_EN in _dashboard(client, accept_language="en")
    assert NAV_ZH in _dashboard(client, accept_language="zh-Hans")


def test_the_switcher_saves_a_logged_in_users_choice(client, alice):
    client.force_login(alice)
    client.post("/language/", {"language": ZH, "next": "/dashboard/"})
    alice.refresh_from_db()
    assert alice.language == ZH
    # Another browser (no cookie) gets the saved choice too.
    client.cookies.clear()
    client.force_login(alice)
    assert NAV_ZH in _dashboard(client, accept_language="en")
    client.post("/language/", {"language": "en", "next": "/dashboard/"})
    alice.refresh_from_db()
    assert alice.language == "en"
    assert NAV_EN in _dashboard(client, accept_language="zh-Hans")


def test_the_switcher_refuses_an_unknown_language_and_a_get(client, alice):
    client.force_login(alice)
    client.post("/language/", {"language": "xx", "next": "/dashboard/"})
    alice.refresh_from_db()
    assert alice.language == ""
    assert client.get("/language/").status_code == 405


def test_the_switcher_is_on_every_page_as_a_post_form(client, db):
    page = client.get("/").text
    assert 'action="/language/"' in page and 'name="language" value="zh-hans"' in page


def test_the_javascript_catalogue_follows_the_language(client, alice):
    reconnecting = json.dumps("重新连接中")[1:-1]  # the catalogue is JSON, ASCII-escaped
    client.force_login(alice)
    assert reconnecting not in client.get("/jsi18n/").text
    assert reconnecting in client.get("/jsi18n/", headers={"accept_language": "zh-Hans"}).text
    assert '<script src="/jsi18n/"></script>' in _dashboard(client)
