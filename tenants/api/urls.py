"""``/api/tokens/`` routes."""

from rest_framework.routers import SimpleRouter

from tenants.api.views import TokenViewSet

router = SimpleRouter()
router.register("tokens", TokenViewSet, basename="token")

urlpatterns = router.urls
