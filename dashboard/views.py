"""The dashboard's screens (seed 002, "Querying events", "Dashboard Trace View"; seed 000,
"Broadcast Streams"): Overview, Event log, an event's detail and its `inspect ->`, Trace
view, Seat page, Company page.

Every screen is a Django template with a little vanilla JS (static/dashboard/): the pages
that move (Overview, Event log, Trace, Seat) draw from the /ws/stream socket's snapshot,
frames and queries; what a page knows when it is served (an event, a seat's history, the
revisions) is rendered here from the same functions the REST routes call. Views are async:
they read the live projection on the loop that updates it, and the store on the
dashboard's read threads.

Sign-in is a Django user (`/dashboard/login/`); pausing, resuming and giving a seat a task
take a staff user (the dashboard's admin grant) and a CSRF-protected POST, and call the
functions the REST routes call; a node that refuses admin routes hides and refuses them
(dashboard.controls). A page that is not there, or a server error, is answered
inside the layout (templates/404.html, 500.html).
"""
from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard import controls, orgchart, seatpage
from dashboard.node import node_in
from dashboard.reads import history_of, run_read
from engine import revisions
from engine.config.secretfields import redact_document as redact
from seats import queries as seats_queries
from seats.errors import SeatRefused
from events import categories
from events.fleet import absent_detail
from events.queries import EventQueryError

log = logging.getLogger("dashboard.views")

LOGIN_URL = "/dashboard/login/"
TRACE_ID = re.compile(r"^[0-9a-fA-F]{32}$")  # W3C trace context: 16 bytes, hexadecimal
INSPECTABLE = frozenset({"agent_turn_completed", "agent_turn_started", "agent_phase_completed"})
WINDOWS = (("", "any time"), ("15m", "last 15 minutes"), ("1h", "last hour"), ("24h", "last 24 hours"), ("7d", "last 7 days"))


def operator_required(view):
    """A signed-in user, or the sign-in page; `request.user` resolved for the template."""

    @functools.wraps(view)
    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        user = await request.auser()
        if not user.is_authenticated:
            return HttpResponseRedirect(f"{LOGIN_URL}?{urlencode({'next': request.get_full_path()})}")
        request.user = user  # the templates read it; resolved here, off the loop's sync path
        return await view(request, *args, **kwargs)

    return wrapper


def _page(request: HttpRequest, template: str, page: str, *, status: int = 200, **context: Any) -> HttpResponse:
    node = node_in(request.scope)
    company = node.company if node is not None else None
    context.setdefault("company_name", company.name if company is not None else None)
    context.setdefault("node_id", node.node_id if node is not None else None)
    return render(request, template, {"page": page, **context}, status=status)


class LoginView(auth_views.LoginView):
    template_name = "dashboard/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    next_page = LOGIN_URL


# -- overview, event log --------------------------------------------------------------------
@operator_required
async def overview(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboard/overview.html", "overview")


@operator_required
async def event_log(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboard/events.html", "events", categories=categories.CATEGORIES, windows=WINDOWS)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


async def _event_or_404(request: HttpRequest, event_id: str) -> dict[str, Any]:
    """The event from whichever live node holds it (events.fleet), or a 404 saying who was asked."""
    try:
        found = await history_of(node_in(request.scope)).get_event(event_id)
    except EventQueryError as exc:
        raise Http404(exc.detail) from None
    if found["item"] is None:
        raise Http404(absent_detail(event_id, found["coverage"]))
    return found["item"]


@operator_required
async def event_detail(request: HttpRequest, event_id: str) -> HttpResponse:
    item = await _event_or_404(request, event_id)
    envelope = [(k, item.get(k)) for k in ("id", "type", "category", "timestamp", "source", "node", "trace_id",
                                            "span_id", "parent_span_id", "delegation_depth", "parent_turn_id")]
    return _page(request, "dashboard/event.html", "events", item=item, envelope=envelope, payload=_pretty(item),
                 inspectable=item.get("type") in INSPECTABLE)


@operator_required
async def event_inspect(request: HttpRequest, event_id: str) -> HttpResponse:
    """`inspect ->` on an LLM turn event: the prompts and responses of the turn's phases."""
    item = await _event_or_404(request, event_id)
    if item.get("type") not in INSPECTABLE:
        raise Http404(f"{item.get('type')}: only a turn or a phase has prompts to inspect")
    phases = [item]
    if item["type"] != "agent_phase_completed" and item.get("trace_id"):
        turn_id = item.get("turn_id")
        siblings = (await history_of(node_in(request.scope)).trace(item["trace_id"]))["items"]
        phases = [e for e in siblings if e.get("type") == "agent_phase_completed" and (not turn_id or e.get("turn_id") == turn_id)]
    return _page(request, "dashboard/inspect.html", "events", item=item, phases=phases,
                 rounds=[(p, _pretty(p.get("rounds") or [])) for p in phases])


# -- traces -----------------------------------------------------------------------------------
@operator_required
async def trace_search(request: HttpRequest) -> HttpResponse:
    """The search box: a trace id (or its first characters, as the tables show it), an event id
    or a task id opens its trace; an ambiguous prefix lists the traces it matches."""
    text = (request.GET.get("q") or request.GET.get("trace_id") or "").strip()
    if not text:
        return HttpResponseRedirect(reverse("dashboard:events"))
    try:
        found = await history_of(node_in(request.scope)).find_trace(text)
    except EventQueryError as exc:
        log.info("dashboard_bad_input", extra={"param": "q", "detail": exc.detail})
        return _page(request, "dashboard/trace_search.html", "trace", query=text, refused=exc.detail, status=422)
    match, coverage = found["match"], found["coverage"]
    if match.trace_id:
        return HttpResponseRedirect(reverse("dashboard:trace", args=[match.trace_id]))
    return _page(request, "dashboard/trace_search.html", "trace", query=text, candidates=match.candidates,
                 unanswered=[n["id"] for n in coverage["nodes"] if not n["answered"]],
                 status=200 if match.candidates else 404)


@operator_required
async def trace_view(request: HttpRequest, trace_id: str) -> HttpResponse:
    if not TRACE_ID.match(trace_id):  # a short or pasted id: resolve it to the trace's own
        return HttpResponseRedirect(f"{reverse('dashboard:trace_search')}?{urlencode({'q': trace_id})}")
    return _page(request, "dashboard/trace.html", "trace", trace_id=trace_id)


# -- seats --------------------------------------------------------------------------------------
@operator_required
async def seat_page(request: HttpRequest, handle: str) -> HttpResponse:
    context = await seatpage.context(node_in(request.scope), handle)
    if context is None:
        raise Http404(f"handle: {handle!r} is no seat of the company")
    return _page(request, "dashboard/seat.html", "seat", **context)


def _staff_post(view):
    @functools.wraps(view)
    async def wrapper(request: HttpRequest, handle: str) -> HttpResponse:
        if not controls.admin_served():
            log.info("dashboard_admin_refused", extra={"path": request.path})
            return controls.refusal(request)
        if not request.user.is_staff:
            return HttpResponseForbidden("pausing, resuming and giving a seat a task take a staff user")
        return await view(request, handle)

    return require_POST(operator_required(wrapper))


@_staff_post
async def seat_pause(request: HttpRequest, handle: str) -> HttpResponse:
    reason = (request.POST.get("reason") or "").strip() or "paused from the dashboard"
    outcome = await seatpage.pause(node_in(request.scope), request, handle, reason=reason,
                                   stop_running=request.POST.get("stop_running") == "on")
    messages.add_message(request, messages.INFO if outcome.ok else messages.ERROR, outcome.message)
    return HttpResponseRedirect(reverse("dashboard:seat", args=[handle]))


@_staff_post
async def seat_resume(request: HttpRequest, handle: str) -> HttpResponse:
    outcome = await seatpage.resume(node_in(request.scope), request, handle)
    messages.add_message(request, messages.INFO if outcome.ok else messages.ERROR, outcome.message)
    return HttpResponseRedirect(reverse("dashboard:seat", args=[handle]))


@_staff_post
async def seat_task(request: HttpRequest, handle: str) -> HttpResponse:
    """The Seat page's task box: `seats.queries.assign_task`, what POST /seats/{handle}/tasks calls. A page
    script asking for JSON gets the route's own answer (or its refusal); a plain form post is
    redirected back with a message."""
    outcome = await seatpage.give_task(node_in(request.scope), request, handle, request.POST.get("text") or "")
    if "application/json" in request.headers.get("Accept", ""):
        body = outcome.answer if outcome.ok else {"detail": outcome.message}
        return JsonResponse(body, status=202 if outcome.ok else outcome.status)
    messages.add_message(request, messages.INFO if outcome.ok else messages.ERROR, outcome.message)
    return HttpResponseRedirect(reverse("dashboard:seat", args=[handle]))


# -- company ------------------------------------------------------------------------------------
def _revisions() -> tuple[Any, list[Any]]:
    return revisions.latest_activated(), revisions.list_revisions(100)


async def _schedules(node) -> tuple[list[dict], str | None]:
    """The Schedules panel: what `GET /schedules` answers, or why it cannot."""
    try:
        return (await seats_queries.schedules(node))["items"], None
    except SeatRefused as exc:
        return [], exc.detail


@operator_required
async def company(request: HttpRequest) -> HttpResponse:
    active, rows = await run_read(_revisions)
    node = node_in(request.scope)
    company_doc = node.company if node is not None else None
    schedules, schedules_error = await _schedules(node)
    return _page(request, "dashboard/company.html", "company", active=active, revisions=rows,
                 tool_servers=seats_queries.tool_servers(node), runs_seats=node is not None and node.seat_runtime is not None,
                 document=redact(active.document) if active is not None else "",
                 serving=node.revision if node is not None else None,
                 org=orgchart.tree(company_doc) if company_doc is not None else [],
                 schedules=schedules, schedules_error=schedules_error)
