"""``/api/webhooks/`` routes."""

from rest_framework.routers import SimpleRouter

from webhooks.api.views import WebhookViewSet

router = SimpleRouter()
router.register("webhooks", WebhookViewSet, basename="webhooks")

urlpatterns = router.urls
