"""Notifications: e-mail and signed outgoing webhooks for the events a customer cares about.

Other apps call ``gpurental.notifications.services.notify(user, event, **context)`` where
the thing happens; the event names and what each carries are in ``events``.
"""
