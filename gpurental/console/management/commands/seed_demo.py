from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from gpurental.console.demo import seed_demo


class Command(BaseCommand):
    help = (
        "Create (or refresh) the demo data: logins, GPU models, plans, images, hosts 'local' "
        "and 'local-a10'. Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--agent-env",
            help="write the local agent's join settings (broker, name, token) to this file "
            "(mode 600); the second host's go beside it, in local-agent-a10.env",
        )

    def handle(self, *args, agent_env=None, **options):
        if not settings.DEBUG:
            # It creates logins with well-known passwords (admin / admin).
            raise CommandError(
                "seed_demo creates logins with well-known passwords, so it runs only with "
                "DEBUG on (make demo sets DEBUG=1); never on a production site"
            )
        result = seed_demo(agent_env=Path(agent_env) if agent_env else None)
        self.stdout.write(self.style.SUCCESS("Demo data ready."))
        self.stdout.write("  admin@example.com / admin   (back-office)")
        self.stdout.write("  demo@example.com  / demo    (customer, with credit)")
        if result.host_token and agent_env:
            self.stdout.write(
                f"  host 'local' (8 simulated A10G GPUs): agent settings written to {agent_env}"
            )
        if agent_env:
            self.stdout.write(
                "  host 'local-a10' (4 simulated A10 GPUs): its agent's settings are in "
                f"{Path(agent_env).with_name('local-agent-a10.env')}"
            )
