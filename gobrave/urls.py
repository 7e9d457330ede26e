"""URL wiring: the admin (also at ``/``), a user's own pages, the REST API, its index and its
schema."""

from functools import cache

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.contrib.staticfiles import finders
from django.http import HttpResponse
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from gobrave.api_root import ApiRootView
from gobrave.metrics import metrics_view

admin.site.site_header = "gobrave operator console"
admin.site.site_title = "gobrave"
admin.site.index_title = "Containers, requests and engines"
# The lists need the width of a 1366 px screen (filters on the right); the index and the
# breadcrumbs lead everywhere the sidebar did.
admin.site.enable_nav_sidebar = False

_swagger = SpectacularSwaggerView.as_view(url_name="schema")


def api_docs(request, *args, **kwargs):
    """Swagger UI for every logged-in user (its assets are local; the schema it reads shows
    only what that user may call); others go to the users' login page."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    return _swagger(request, *args, **kwargs)


@cache
def _favicon_bytes() -> bytes:
    with open(finders.find("core/favicon.svg"), "rb") as icon:
        return icon.read()


def favicon(request):
    """The console's icon at the path browsers ask for by themselves (the admin links it too)."""
    response = HttpResponse(_favicon_bytes(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


urlpatterns = [
    path("", RedirectView.as_view(url=reverse_lazy("admin:index")), name="home"),
    path("admin/", admin.site.urls),
    path("account/", include("tenants.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", api_docs, name="swagger-ui"),
    path("api/", ApiRootView.as_view(), name="api-root"),
    path("api/", include("containers.api.urls")),
    path("api/", include("outbox.api.urls")),
    path("api/", include("dags.api.urls")),
    path("api/", include("events.api.urls")),
    path("api/", include("tenants.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
]

# Under /api/, Django's own 404 and 500 pages answer in the API's error shape too.
handler404 = "core.api.errors.page_not_found"
handler500 = "core.api.errors.server_error"
