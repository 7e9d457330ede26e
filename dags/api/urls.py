"""``/api/dag-templates/`` and ``/api/dag-runs/`` routes."""

from rest_framework.routers import SimpleRouter

from dags.api.views import DagRunViewSet, DagTemplateViewSet

router = SimpleRouter()
router.register("dag-templates", DagTemplateViewSet, basename="dag-template")
router.register("dag-runs", DagRunViewSet, basename="dag-run")

urlpatterns = router.urls
