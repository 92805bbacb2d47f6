"""Choice labels customers read (statuses, kinds, scopes) follow the active language."""

from django.utils import translation

from gpurental.accounts.models import ApiKeyScope
from gpurental.billing.models import InvoiceStatus
from gpurental.rentals.models import InstanceStatus
from tests.api.conftest import assert_error
from tests.i18n_api.conftest import ZH


def test_status_and_scope_labels_are_chinese_under_zh_hans():
    with translation.override("zh-hans"):
        assert str(InstanceStatus.RUNNING.label) == "运行中"
        assert str(InvoiceStatus.VOID.label) == "已作废"
        assert str(ApiKeyScope.BILLING.label) == "用量、发票和余额"
    assert str(InstanceStatus.RUNNING.label) == "Running"


def test_an_unknown_status_filter_names_the_codes_in_a_chinese_sentence(as_alice):
    error = assert_error(
        as_alice.get("/api/v1/instances/", {"status": "nope"}, **ZH), 400, "invalid", field="status"
    )
    assert error["fields"]["status"][0].startswith("'nope' 不是实例状态；请从以下选择： pending, ")
