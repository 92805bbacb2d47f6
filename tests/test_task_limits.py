"""Every control-plane task's soft time limit is below its hard one. Celery refuses to send a
task whose own time_limit is under the default soft limit (CELERY_TASK_SOFT_TIME_LIMIT):
beat logged "soft_time_limit must be less than or equal to time_limit" every minute and
never ran the task."""

from __future__ import annotations

from django.conf import settings

from gpurental.celery_app import app


def test_every_task_s_soft_limit_is_below_its_hard_limit():
    app.loader.import_default_modules()
    wrong = []
    for name, task in app.tasks.items():
        if not name.startswith("gpurental."):
            continue
        hard = task.time_limit or settings.CELERY_TASK_TIME_LIMIT
        soft = task.soft_time_limit or settings.CELERY_TASK_SOFT_TIME_LIMIT
        if soft > hard:
            wrong.append(f"{name}: soft {soft} > hard {hard}")
    assert not wrong, wrong
