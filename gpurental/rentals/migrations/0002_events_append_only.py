from django.db import migrations

from gpurental.dbtools import append_only


class Migration(migrations.Migration):
    dependencies = [("rentals", "0001_initial")]
    operations = [append_only("rentals_instanceevent")]
