from django.apps import AppConfig


class SeatsConfig(AppConfig):
    name = "seats"
    default_auto_field = "django.db.models.BigAutoField"
