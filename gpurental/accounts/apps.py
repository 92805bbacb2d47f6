from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "gpurental.accounts"
    label = "accounts"
