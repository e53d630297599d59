"""The webhook sources, by the name their route carries (`POST /webhooks/{name}`)."""
from __future__ import annotations

from notify.sources.base import Source
from notify.sources.github import GitHub
from notify.sources.gitlab import GitLab
from notify.sources.jira import Jira
from notify.sources.mattermost import Mattermost
from notify.sources.slack import Slack

SOURCES: dict[str, Source] = {s.name: s for s in (GitHub(), GitLab(), Jira(), Mattermost(), Slack())}


def source_named(name: str) -> Source | None:
    """The source a route or a delivery names, else None."""
    return SOURCES.get(name)
