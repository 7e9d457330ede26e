"""``/api/containers/``, ``/api/templates/``, ``/api/runtimes/`` and ``/api/queue/`` routes."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from containers.api.views import ContainerViewSet, QueueView, RuntimeViewSet, TemplateViewSet

router = SimpleRouter()
router.register("containers", ContainerViewSet, basename="container")
router.register("templates", TemplateViewSet, basename="template")
router.register("runtimes", RuntimeViewSet, basename="runtime")

urlpatterns = [
    *router.urls,
    path("queue/", QueueView.as_view(), name="queue"),
]
