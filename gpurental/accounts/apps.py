from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "gpurental.accounts"
    label = "accounts"

    def ready(self) -> None:
        from gpurental.accounts import signals  # noqa: F401 - connects the audit receivers
