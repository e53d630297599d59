"""`python manage.py crewlet_event_categories > docs/event-categories.md`: print the category map."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from events.categories import render_markdown


class Command(BaseCommand):
    help = "Print docs/event-categories.md, generated from the event category map (events/categories.py)."

    def handle(self, *args, **options) -> None:
        self.stdout.write(render_markdown(), ending="")
