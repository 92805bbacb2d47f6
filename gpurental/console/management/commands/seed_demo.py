from django.core.management.base import BaseCommand

from gpurental.console.demo import seed_demo


class Command(BaseCommand):
    help = "Create (or refresh) the demo data: logins, GPU models, plans, images, host 'local'. Idempotent."

    def handle(self, *args, **options):
        result = seed_demo()
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write("  admin@example.com / admin   (back-office)")
        self.stdout.write("  demo@example.com  / demo    (customer, with credit)")
        if result.host_token:
            self.stdout.write("  host 'local' created with 8 simulated A10G GPUs")
