"""The REST routes under /events, their bearer tokens, and the read-only admin, through Django's
test client and through a real HTTP server on 127.0.0.1."""
from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from django.conf import settings
from django.urls import path
from ninja import NinjaAPI

from crewlet_site import urls as site_urls
from crewlet_site.auth import TokenAuth, configured_tokens
from events.models import StoredEvent
from events.store import write_events
from events.tracing import new_trace_id
from tests.settings import ADMIN_TOKEN, READ_TOKEN
from tests.events.factories import make_event

pytestmark = pytest.mark.timeout(60)

T0 = datetime(2025, 6, 1, 9, 0, 0, tzinfo=timezone.utc)
READ = {"HTTP_AUTHORIZATION": f"Bearer {READ_TOKEN}"}
ADMIN = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}

# A route only the admin grant reaches, beside the project's own, so the 403 is tested on a
# real route; this module is its own URLconf (`pytest.mark.urls(__name__)`).
probe = NinjaAPI(urls_namespace="events-test-probe", docs_url=None, openapi_url=None)


@probe.get("/admin-only", auth=TokenAuth("admin"))
def admin_only(request):
    return {"token_id": request.auth.token_id}


urlpatterns = [path("probe/", probe.urls), *site_urls.urlpatterns]


@pytest.fixture
def history():
    trace_id = new_trace_id()
    events = [
        make_event("task_assigned", at=T0, agent_id="id-ada", agent_handle="ada", task="one", trace_id=trace_id),
        make_event("external_notification", at=T0 + timedelta(seconds=1), agent_id="id-bob", trace_id=trace_id),
        make_event("auxiliary_spend", at=T0 + timedelta(seconds=2), agent_id="id-ada", trace_id=trace_id),
        make_event("agent_turn_completed", at=T0 + timedelta(seconds=3), agent_id="id-bob"),
    ]
    write_events(events)
    return trace_id, [str(e.id) for e in events]


def test_the_suite_config_carries_both_tokens():
    assert settings.NODE.config is not None, settings.NODE.load_error
    assert {t.id for t in configured_tokens()} == {"admin", "viewer"}


# -- Django's test client ---------------------------------------------------------------


@pytest.mark.django_db
def test_a_read_token_lists_events_newest_first(client, history):
    trace_id, ids = history
    response = client.get("/events", **READ)
    assert response.status_code == 200, response.content
    body = response.json()
    assert [i["id"] for i in body["items"]] == ids[::-1]
    assert body["next_cursor"] is None
    assert {"category", "summary", "trace_id", "timestamp"} <= set(body["items"][0])


@pytest.mark.django_db
def test_an_admin_token_reads_too(client, history):
    assert client.get("/events", **ADMIN).status_code == 200


@pytest.mark.django_db
def test_every_query_parameter_reaches_the_query(client, history):
    trace_id, ids = history

    def listed(query: str) -> list[str]:
        response = client.get(f"/events?{query}", **READ)
        assert response.status_code == 200, response.content
        return [i["id"] for i in response.json()["items"]]

    assert listed("category=task") == [ids[0]]
    assert listed("type=task_assigned&type=external_notification") == [ids[1], ids[0]]
    assert listed("agent=id-ada") == [ids[2], ids[0]]
    assert listed("agent=ada") == [ids[0]]
    assert listed(f"trace_id={trace_id}") == [ids[2], ids[1], ids[0]]
    assert listed("since=2025-06-01T09:00:01Z&until=2025-06-01T09:00:03%2B00:00") == [ids[2], ids[1]]
    assert listed("feed_only=true&agent=id-ada") == [ids[0]]
    first = client.get("/events?limit=3", **READ).json()
    assert [i["id"] for i in first["items"]] == ids[:0:-1]
    rest = client.get("/events", {"limit": 3, "cursor": first["next_cursor"]}, **READ).json()
    assert [i["id"] for i in rest["items"]] == [ids[0]] and rest["next_cursor"] is None


@pytest.mark.django_db
def test_one_event_and_one_trace(client, history):
    trace_id, ids = history
    one = client.get(f"/events/{ids[1]}", **READ)
    assert one.status_code == 200 and one.json()["id"] == ids[1] and one.json()["category"] == "notification"
    whole = client.get(f"/events/trace/{trace_id}", **READ)
    assert whole.status_code == 200
    assert whole.json()["trace_id"] == trace_id
    assert [i["id"] for i in whole.json()["items"]] == ids[:3]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("cursor=bogus", "cursor"),
        ("since=last+tuesday", "since"),
        ("until=2025-06-01", "until"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=many", "limit"),
        ("category=gossip", "category"),
    ],
)
def test_a_bad_parameter_is_a_422_naming_it(client, query, param):
    response = client.get(f"/events?{query}", **READ)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{param}: "), response.json()


@pytest.mark.django_db
def test_an_absent_event_is_a_404_and_a_malformed_id_a_422(client):
    missing = client.get(f"/events/{uuid.uuid4()}", **READ)
    assert missing.status_code == 404 and missing.json()["detail"].startswith("id: ")
    malformed = client.get("/events/not-an-id", **READ)
    assert malformed.status_code == 422 and malformed.json()["detail"].startswith("id: ")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "headers",
    [{}, {"HTTP_AUTHORIZATION": "Bearer wrong-token"}, {"HTTP_AUTHORIZATION": f"Token {READ_TOKEN}"}, {"HTTP_AUTHORIZATION": "Bearer "}],
)
def test_no_token_or_a_wrong_one_is_a_401_naming_the_header(client, headers):
    for url in ("/events", f"/events/{uuid.uuid4()}", "/events/trace/abc"):
        response = client.get(url, **headers)
        assert response.status_code == 401
        assert response["Content-Type"].startswith("application/json")
        assert "Authorization" in response.json()["detail"]


@pytest.mark.urls(__name__)
def test_a_read_token_on_an_admin_route_is_a_403_and_the_token_never_reaches_the_log(client, caplog):
    with caplog.at_level(logging.DEBUG):
        refused = client.get("/probe/admin-only", **READ)
        allowed = client.get("/probe/admin-only", **ADMIN)
        client.get("/probe/admin-only", HTTP_AUTHORIZATION=f"Token {READ_TOKEN}")
    assert refused.status_code == 403
    assert refused.json()["detail"].endswith("needs the admin grant")
    assert allowed.status_code == 200 and allowed.json() == {"token_id": "admin"}
    everything_logged = caplog.text + "".join(str(vars(r)) for r in caplog.records)
    assert READ_TOKEN not in everything_logged and ADMIN_TOKEN not in everything_logged
    # The refusal is logged by the token's id.
    assert any(getattr(r, "token_id", None) == "viewer" for r in caplog.records)


def test_a_grant_the_api_does_not_know_is_refused_at_import():
    with pytest.raises(ValueError, match="grant"):
        TokenAuth("write")


# -- a real HTTP server -----------------------------------------------------------------


@pytest.mark.urls(__name__)
def test_errors_over_a_real_socket_are_json_bodies(live_server):
    assert live_server.url.startswith("http://127.0.0.1:") or live_server.url.startswith("http://localhost:")
    event = make_event("task_assigned", at=T0, agent_id="id-ada", task="over the wire")
    write_events([event])
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        cases = [
            ("/events", {}, 401, "Authorization"),
            ("/events", {"Authorization": "Bearer not-a-token"}, 401, "Authorization"),
            ("/probe/admin-only", {"Authorization": f"Bearer {READ_TOKEN}"}, 403, "needs the admin grant"),
            ("/events?cursor=zzz", {"Authorization": f"Bearer {READ_TOKEN}"}, 422, "cursor: "),
            ("/events?limit=9000", {"Authorization": f"Bearer {READ_TOKEN}"}, 422, "limit: "),
            ("/events/not-an-id", {"Authorization": f"Bearer {READ_TOKEN}"}, 422, "id: "),
            (f"/events/{uuid.uuid4()}", {"Authorization": f"Bearer {READ_TOKEN}"}, 404, "id: "),
        ]
        for url, headers, status, words in cases:
            response = http.get(url, headers=headers)
            assert response.status_code == status, (url, response.text)
            assert response.headers["content-type"].startswith("application/json"), url
            detail = response.json()["detail"]
            assert words in detail, (url, detail)
            assert "Traceback" not in response.text
        found = http.get(f"/events/{event.id}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert found.status_code == 200 and found.json()["task"] == "over the wire"


# -- the admin --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_shows_events_read_only(admin_client, history):
    trace_id, ids = history
    listing = admin_client.get("/admin/events/storedevent/")
    assert listing.status_code == 200
    text = listing.content.decode()
    assert "task_assigned" in text and "external_notification" in text

    by_category = admin_client.get("/admin/events/storedevent/?category__exact=notification")
    assert by_category.status_code == 200 and by_category.context["cl"].result_count == 1
    by_agent = admin_client.get("/admin/events/storedevent/?agent=id-ada")
    assert by_agent.context["cl"].result_count == 2
    by_trace = admin_client.get(f"/admin/events/storedevent/?q={trace_id}")
    assert by_trace.context["cl"].result_count == 3
    by_id = admin_client.get(f"/admin/events/storedevent/?q={ids[3]}")
    assert by_id.context["cl"].result_count == 1

    row = StoredEvent.objects.get(event_id=ids[0])
    detail = admin_client.get(f"/admin/events/storedevent/{row.pk}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "<pre" in page and "&quot;task&quot;: &quot;one&quot;" in page  # pretty-printed, indented JSON
    assert 'name="_save"' not in page

    assert admin_client.get("/admin/events/storedevent/add/").status_code == 403
    assert admin_client.post(f"/admin/events/storedevent/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    admin_client.post(f"/admin/events/storedevent/{row.pk}/change/", {"summary": "rewritten"})
    assert StoredEvent.objects.get(pk=row.pk).summary != "rewritten"
