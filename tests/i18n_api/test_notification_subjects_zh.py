"""E-mail subjects are written in the recipient's saved language (User.language)."""

from decimal import Decimal

from gpurental.notifications.models import Notification
from gpurental.notifications.services import notify
from tests.factories import UserFactory


def test_subject_follows_the_users_language(db, django_capture_on_commit_callbacks):
    chinese = UserFactory(language="zh-hans")
    english = UserFactory()
    for user in (chinese, english):
        notify(user, "low_balance", dedupe_key="t", balance=Decimal("1.50"))
    subjects = dict(Notification.objects.values_list("user_id", "subject"))
    assert subjects[chinese.pk].startswith("您的余额不足：1.50 ")
    assert subjects[english.pk].startswith("Your balance is low: 1.50 ")
