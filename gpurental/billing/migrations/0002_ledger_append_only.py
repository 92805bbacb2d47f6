from django.db import migrations

from gpurental.dbtools import append_only


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]
    operations = [append_only("billing_ledgerentry"), append_only("billing_charge")]
