from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "gpurental.billing"
    label = "billing"
