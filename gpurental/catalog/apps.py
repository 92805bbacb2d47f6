from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "gpurental.catalog"
    label = "catalog"
