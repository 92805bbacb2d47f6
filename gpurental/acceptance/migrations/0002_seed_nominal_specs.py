"""Nominal figures from the spec sheets for the GPU models already in the catalog, and the
CPU nominal. Models added later are seeded the first time one of their hosts is benchmarked
(services.nominal_gpu_ensure)."""

from django.db import migrations

from gpurental.acceptance.specsheets import CPU_SPEC, GPU_SPECS


def seed(apps, schema_editor):
    NominalSpec = apps.get_model("acceptance", "NominalSpec")
    GPUModel = apps.get_model("catalog", "GPUModel")
    NominalSpec.objects.get_or_create(is_cpu=True, defaults=CPU_SPEC)
    for model in GPUModel.objects.all():
        sheet = next((GPU_SPECS[n] for n in model.nvml_names or [] if n in GPU_SPECS), None)
        if sheet is not None:
            NominalSpec.objects.get_or_create(gpu_model=model, defaults=sheet)


class Migration(migrations.Migration):
    dependencies = [("acceptance", "0001_initial")]

    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
