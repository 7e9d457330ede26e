"""``/api/outbox/`` routes."""

from rest_framework.routers import SimpleRouter

from outbox.api.views import OutboxViewSet

router = SimpleRouter()
router.register("outbox", OutboxViewSet, basename="outbox")

urlpatterns = router.urls
