"""URL wiring: the admin, the REST API and its schema."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from gobrave.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/", include("containers.api.urls")),
    path("api/", include("outbox.api.urls")),
    path("metrics", metrics_view, name="metrics"),
]

# Under /api/, Django's own 404 and 500 pages answer in the API's error shape too.
handler404 = "gobrave.api_errors.page_not_found"
handler500 = "gobrave.api_errors.server_error"
