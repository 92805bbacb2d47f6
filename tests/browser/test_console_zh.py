"""The console in Simplified Chinese, in a real Chromium that asks for English
(Accept-Language en-US): a customer who chose zh-hans logs in and sees the dashboard and
the billing page in Chinese, with amounts in yuan (¥), and the invoice PDF downloaded in
that session carries Chinese labels and the customer's Chinese company name, read back.
Screenshots go to var/screenshots/console-zh-*.png."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from pypdf import PdfReader

from tests.browser.test_console_flow import browser  # noqa: F401 - the fixture
from tests.i18n.test_invoice_pdf_zh import issued_invoice

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SHOTS = Path(django_settings.BASE_DIR) / "var" / "screenshots"
PASSWORD = "correct horse battery staple"
COMPANY = "杭州云帆智算科技有限公司"


@pytest.fixture
def zh_customer(alice, settings, a100, image, make_host, sent):
    from gpurental.billing.services import credit_add
    from gpurental.billing.services.details import billing_details_update
    from gpurental.rentals.services import lifecycle as lc

    settings.BILLING_CURRENCY = "CNY"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    alice.set_password(PASSWORD)
    alice.language = "zh-hans"
    alice.save()
    billing_details_update(
        user=alice, full_name="王芳", company=COMPANY, billing_address="杭州市西湖区文三路90号"
    )
    credit_add(user=alice, amount=Decimal("2000.00"))
    make_host("node1", a100, count=8)
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=a100, gpu_count=1, name="训练-bert"
    )
    lc.instance_report_running(instance_id=str(instance.pk), port=40000, container_id="c")
    return issued_invoice(alice, description="训练-bert (A100 ×1)", amount="1234.56")


def test_a_zh_hans_customer_sees_the_console_and_invoice_in_chinese(
    browser,  # noqa: F811
    live_server,
    zh_customer,
):
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = context.new_page()
    page.set_default_timeout(30_000)

    page.goto(f"{live_server.url}/login/")
    assert page.locator("html").get_attribute("lang") == "en"  # the browser asks for English
    page.fill("input[name=username]", "alice@example.com")
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url("**/dashboard/")

    # The saved choice beats the browser's Accept-Language.
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    nav = page.inner_text("header nav")
    assert "概览" in nav and "预约" in nav and "账单" in nav and "退出登录" in nav
    assert page.inner_text("#balance").startswith("¥")
    body = page.inner_text("main")
    assert "余额" in body and "本月消费" in body and "实例" in body and "训练-bert" in body
    assert "Balance" not in body and "Instances" not in body
    page.screenshot(path=str(SHOTS / "console-zh-dashboard.png"), full_page=True)

    # Words drawn by static/js come from the JavaScript catalogue in the same language.
    page.click("header nav >> text=启动")
    page.wait_for_url("**/launch/")
    assert "按秒计费" in page.inner_text("#estimate")
    page.screenshot(path=str(SHOTS / "console-zh-launch.png"), full_page=True)

    page.click("header nav >> text=账单")
    page.wait_for_url("**/billing/invoices/")
    body = page.inner_text("main")
    assert "发票" in body and "用量" in body and "预计月底消费" in body
    assert "¥1,234.56" in page.inner_text("#invoices")
    page.screenshot(path=str(SHOTS / "console-zh-billing.png"), full_page=True)

    # The PDF, fetched in the same session: Chinese labels and the Chinese company name.
    href = page.get_attribute("#invoices a:has-text('PDF')", "href")
    response = context.request.get(f"{live_server.url}{href}")
    assert response.ok and response.headers["content-type"] == "application/pdf"
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(response.body())).pages)
    for expected in (COMPANY, "王芳", "发票 INV-", "购买方：", "合计", "1,234.56", "金额（CNY）"):
        assert expected in text, expected

    # Switching to English on the page saves the choice: the next page is English.
    page.click("#language-switcher button[value=en]")
    page.wait_for_url("**/billing/invoices/")
    assert "Invoices" in page.inner_text("main") and "¥1,234.56" in page.inner_text("#invoices")
    page.screenshot(path=str(SHOTS / "console-zh-switched-to-english.png"), full_page=True)
    context.close()
