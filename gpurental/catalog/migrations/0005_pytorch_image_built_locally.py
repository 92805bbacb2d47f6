"""The "PyTorch 2.1 + CUDA 12.1" template named gpurental/pytorch-cuda:2.1, which nothing
built (its Dockerfile needed a registry): it becomes the PyTorch template of the image
`make images` builds, and its old slug an alias, so that framework="pytorch-2.1" keeps
working. Renamed in place, so that its instances and reservations run the new image on
their next start."""

from django.db import migrations

OLD_SLUG, OLD_IMAGE = "pytorch-2.1", "gpurental/pytorch-cuda:2.1"
NEW = {
    "slug": "pytorch-2.13",
    "name": "PyTorch 2.13 + CUDA 13.0 + JupyterLab",
    "image": "gpurental/pytorch:2.13.0-cuda",
    "cpu_image": "gpurental/pytorch:2.13.0-cpu",
    "ssh_port": 2222,
    "description": "torch 2.13.0 (CUDA 13.0 wheels on NVIDIA hosts, CPU wheels on simulated "
    "ones), transformers 5.18.0, JupyterLab 4.6.6 on Debian 12; built by `make images` "
    "(CPU) and `CUDA=1 make images` (CUDA).",
}
ALIAS_NOTE = "the article's framework name; runs PyTorch 2.13"


def forwards(apps, schema_editor):
    ImageTemplate = apps.get_model("catalog", "ImageTemplate")
    ImageAlias = apps.get_model("catalog", "ImageAlias")
    old = ImageTemplate.objects.filter(slug=OLD_SLUG, image=OLD_IMAGE).first()
    if old is None or ImageTemplate.objects.filter(slug=NEW["slug"]).exists():
        return
    for field, value in NEW.items():
        setattr(old, field, value)
    old.save()
    ImageAlias.objects.get_or_create(name=OLD_SLUG, defaults={"template": old, "note": ALIAS_NOTE})


def backwards(apps, schema_editor):
    ImageTemplate = apps.get_model("catalog", "ImageTemplate")
    ImageAlias = apps.get_model("catalog", "ImageAlias")
    ImageAlias.objects.filter(name=OLD_SLUG, template__slug=NEW["slug"]).delete()
    ImageTemplate.objects.filter(slug=NEW["slug"], image=NEW["image"]).update(
        slug=OLD_SLUG, image=OLD_IMAGE
    )


class Migration(migrations.Migration):
    dependencies = [("catalog", "0004_image_alias")]

    operations = [migrations.RunPython(forwards, backwards)]
