"""The dashboard's HTML screens, mounted at /dashboard/."""
from __future__ import annotations

from django.urls import path

from dashboard import views
from dashboard.signin import off_the_api_thread

app_name = "dashboard"

urlpatterns: list = [
    path("", views.overview, name="overview"),
    path("login/", off_the_api_thread(views.LoginView.as_view()), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("events/", views.event_log, name="events"),
    path("events/<uuid:event_id>/", views.event_detail, name="event"),
    path("events/<uuid:event_id>/inspect/", views.event_inspect, name="inspect"),
    path("traces/", views.trace_search, name="trace_search"),
    path("traces/<str:trace_id>/", views.trace_view, name="trace"),
    path("seats/<str:handle>/", views.seat_page, name="seat"),
    path("seats/<str:handle>/pause", views.seat_pause, name="seat_pause"),
    path("seats/<str:handle>/resume", views.seat_resume, name="seat_resume"),
    path("seats/<str:handle>/tasks", views.seat_task, name="seat_task"),
    path("company/", views.company, name="company"),
]
