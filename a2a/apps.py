from django.apps import AppConfig


class A2aConfig(AppConfig):
    name = "a2a"
    default_auto_field = "django.db.models.BigAutoField"
