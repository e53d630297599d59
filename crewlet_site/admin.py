"""The site's admin: Django's, with the pages the apps add beside their models (the dashboard's
seat pauses, which are the fleet's records rather than a table of this node's)."""
from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.urls import path


class CrewletAdminSite(admin.AdminSite):
    site_header = "Crewlet operations"
    site_title = "Crewlet"

    def get_urls(self):
        from dashboard.admin import seat_pauses_view

        return [path("seats/pauses/", self.admin_view(seat_pauses_view), name="seat_pauses"), *super().get_urls()]


class CrewletAdminConfig(AdminConfig):
    default_site = "crewlet_site.admin.CrewletAdminSite"
