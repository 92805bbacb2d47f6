from django.core.management.base import BaseCommand

from gpurental.catalog.starter import starter_catalog_load


class Command(BaseCommand):
    help = (
        "Load the starter catalog (GPU models, plans for 1/2/4/8 GPUs, the images `make images` "
        "builds); no logins. Idempotent: edit prices in the back-office afterwards."
    )

    def handle(self, *args, **options):
        models = starter_catalog_load()
        self.stdout.write(
            self.style.SUCCESS(f"Starter catalog loaded: {', '.join(sorted(models))}.")
        )
