"""The engine app's tables: the company document's revisions (seed 002, "The store":
`company_config` holds the revision payloads; which one is current is the fleet's business
and lives in the coordination store)."""
from __future__ import annotations

from django.db import models


class CompanyRevision(models.Model):
    """One imported company document, verbatim, with who imported it and when.

    `generation` is the fleet-wide number the activation pointer gave it when it became the
    active revision (None for a revision that was never activated on this node's store).
    """

    digest = models.CharField(max_length=64, db_index=True)
    document = models.TextField(help_text="the company YAML exactly as imported")
    imported_by = models.CharField(max_length=200)
    imported_at = models.DateTimeField()
    source = models.CharField(max_length=20, default="file")  # file | api | fleet
    generation = models.PositiveIntegerField(null=True, blank=True, db_index=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    company_name = models.CharField(max_length=200, default="")

    class Meta:
        db_table = "company_config"
        ordering = ["-id"]
        get_latest_by = "id"

    def __str__(self) -> str:
        gen = f"generation {self.generation}" if self.generation else "never activated"
        return f"{self.company_name or 'company'} {self.digest[:12]} ({gen})"
