from django.apps import AppConfig


class TenantsConfig(AppConfig):
    """Who may do what: the ready-made groups, per-owner quotas, what users never see."""

    name = "tenants"
    verbose_name = "Tenants"
    default_auto_field = "django.db.models.BigAutoField"
