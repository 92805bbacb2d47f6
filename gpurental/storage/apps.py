from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "gpurental.storage"
    verbose_name = "Storage billing"

    def ready(self):
        from gpurental.billing import sources
        from gpurental.storage import selectors

        sources.register(
            sources.LineSource(
                name="storage",
                lines=selectors.storage_invoice_lines,
                debits=selectors.storage_line_debits,
                usage=selectors.storage_usage_by_day,
            )
        )
