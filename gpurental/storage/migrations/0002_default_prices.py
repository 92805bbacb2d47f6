from decimal import Decimal

from django.db import migrations

# Per GB-month in BILLING_CURRENCY; staff change them in the back-office.
DEFAULTS = {"workspace": "0.20", "volume": "0.07", "saved_image": "0.05"}


def add(apps, schema_editor):
    StoragePrice = apps.get_model("storage", "StoragePrice")
    for kind, price in DEFAULTS.items():
        StoragePrice.objects.get_or_create(kind=kind, defaults={"gb_month": Decimal(price)})


class Migration(migrations.Migration):
    dependencies = [("storage", "0001_initial")]
    operations = [migrations.RunPython(add, migrations.RunPython.noop)]
