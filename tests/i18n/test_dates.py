"""Dates follow the language: templates name a format, English keeps the ISO style and
Chinese writes 年月日."""

from datetime import UTC, datetime

from django.utils import translation
from django.utils.dateformat import format as date_format
from django.utils.formats import get_format

from gpurental.accounts.services import api_key_create

MOMENT = datetime(2026, 10, 1, 14, 5, tzinfo=UTC)


def _shown(language: str, name: str) -> str:
    with translation.override(language):
        return date_format(MOMENT, get_format(name))


def test_english_dates_keep_the_iso_order():
    assert _shown("en", "SHORT_DATETIME_FORMAT") == "2026-10-01 14:05"
    assert _shown("en", "SHORT_DATE_FORMAT") == "2026-10-01"
    assert _shown("en", "YEAR_MONTH_FORMAT") == "2026-10"


def test_chinese_dates_are_written_with_year_month_day():
    assert _shown("zh-hans", "SHORT_DATETIME_FORMAT") == "2026年10月1日 14:05"
    assert _shown("zh-hans", "YEAR_MONTH_FORMAT") == "2026年10月"


def test_a_page_shows_dates_in_the_pages_language(client, alice):
    api_key_create(user=alice, name="ci")
    client.force_login(alice)
    english = client.get("/keys/").text
    chinese = client.get("/keys/", headers={"accept_language": "zh-Hans"}).text
    assert "年" not in english.split("<tbody>")[1]
    assert "年" in chinese.split("<tbody>")[1] and "从未" in chinese
