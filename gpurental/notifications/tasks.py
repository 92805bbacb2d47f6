"""Celery tasks of notifications: thin, take ids, idempotent (a repeat finds nothing due)."""

from __future__ import annotations

from gpurental.celery_app import app
from gpurental.notifications import services


@app.task(name="gpurental.notifications.tasks.email_send", time_limit=60, soft_time_limit=50)
def email_send(notification_id: str) -> bool:
    return services.email_send(notification_id=notification_id)


@app.task(name="gpurental.notifications.tasks.webhook_deliver", time_limit=60, soft_time_limit=50)
def webhook_deliver(delivery_id: str) -> bool:
    return services.delivery_attempt(delivery_id=delivery_id) is not None


@app.task(name="gpurental.notifications.tasks.webhooks_sweep", time_limit=120, soft_time_limit=100)
def webhooks_sweep() -> int:
    """Deliveries whose retry task never came, e-mails whose task was lost (a broker
    restart): queued again. Each task does nothing when its work is done already."""
    due = services.deliveries_due()
    for delivery_id in due:
        webhook_deliver.delay(str(delivery_id))
    stuck = services.emails_stuck()
    for notification_id in stuck:
        email_send.delay(str(notification_id))
    return len(due) + len(stuck)
