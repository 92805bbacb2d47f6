from gpurental.baremetal import services
from gpurental.celery_app import app


@app.task(name="gpurental.baremetal.tasks.leases_tick", time_limit=120, soft_time_limit=100)
def leases_tick() -> dict:
    """Start leases at their start, end them at their end, meter the active ones."""
    return services.leases_tick()
