"""The control-plane Celery app (web enqueues, the control worker and beat run it).

Agents on GPU hosts use their own app in gpurental.agent, which needs no Django.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")

app = Celery("gpurental")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Every periodic job is declared here, in one place.
app.conf.beat_schedule = {}
