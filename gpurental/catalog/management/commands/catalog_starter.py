from django.core.management.base import BaseCommand

from gpurental.catalog.starter import starter_catalog_load


class Command(BaseCommand):
    help = (
        "Load the starter catalog (GPU models, plans for 1/2/4/8 GPUs, the images `make images` "
        "builds); no logins. Idempotent: edit prices in the back-office afterwards."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--cuda",
            action="store_true",
            help="also the CUDA images `make images-cuda` builds (CUDA 11.8 and 12.4, "
            "PyTorch 2.1.2, TensorFlow 2.18): for GPU hosts that have them",
        )

    def handle(self, *args, **options):
        models = starter_catalog_load(cuda=options["cuda"])
        self.stdout.write(
            self.style.SUCCESS(f"Starter catalog loaded: {', '.join(sorted(models))}.")
        )
