from django.db import migrations

from gpurental.dbtools import append_only


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]
    operations = [append_only("accounts_auditevent")]
