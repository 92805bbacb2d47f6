from django.apps import AppConfig


class ModelCacheConfig(AppConfig):
    name = "gpurental.modelcache"
    verbose_name = "Model cache"
    default_auto_field = "django.db.models.BigAutoField"
