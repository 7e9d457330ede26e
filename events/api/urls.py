"""``/api/events/``."""

from django.urls import path

from events.api.views import EventsView

urlpatterns = [path("events/", EventsView.as_view(), name="events")]
