"use strict";
/* Event log (seed 002, "Querying events"): filters by category chip, type, seat, time window
 * and trace id; newest first, each row's date and time to the millisecond; paged with the
 * store's cursor; a partial answer (`coverage.complete: false`) says so above the table; every
 * answer comes from the
 * `events_page` query, which is GET /events's own function. The filters live in the URL, so a
 * filtered log is a link. Events that arrive and match are added at the top as they happen. */
(function () {
  const { h, fmt, links } = Live;
  const form = document.getElementById("filters");
  const body = document.querySelector("#log tbody");
  const older = document.getElementById("older");
  const state = document.getElementById("log-state");
  const WINDOW_MS = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };
  let filters = {};
  let cursor = null;
  let generation = 0;

  function readUrl() {
    const q = new URLSearchParams(location.search);
    return {
      category: q.get("category") || "",
      type: q.get("type") || "",
      agent: q.get("agent") || "",
      window: q.get("window") || "",
      trace_id: q.get("trace_id") || "",
    };
  }

  function writeUrl() {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
    history.replaceState(null, "", `${location.pathname}${q.toString() ? "?" + q : ""}`);
  }

  function showFilters() {
    for (const chip of form.querySelectorAll(".chip")) chip.setAttribute("aria-pressed", String(chip.dataset.category === filters.category));
    form.elements.type.value = filters.type;
    form.elements.window.value = filters.window;
    form.elements.trace_id.value = filters.trace_id;
    ensureSeatOption(filters.agent);
    form.elements.agent.value = filters.agent;
  }

  function ensureSeatOption(handle) {
    if (!handle) return;
    const select = form.elements.agent;
    if (![...select.options].some((o) => o.value === handle)) select.append(h("option", { value: handle, text: handle }));
  }

  function types() {
    return filters.type.split(",").map((t) => t.trim()).filter(Boolean);
  }

  function args(withCursor) {
    const a = { limit: 50 };
    if (filters.category) a.category = filters.category;
    if (types().length) a.type = types();
    if (filters.agent) a.agent = filters.agent;
    if (filters.trace_id) a.trace_id = filters.trace_id;
    if (WINDOW_MS[filters.window]) a.since = new Date(Date.now() - WINDOW_MS[filters.window]).toISOString();
    if (withCursor && cursor) a.cursor = cursor;
    return a;
  }

  function shownText(n) {
    return `${fmt.number(n)} event${n === 1 ? "" : "s"} shown, newest first`;
  }

  function row(item, fresh) {
    return h("tr", { "data-event-id": item.id, "data-type": Live.label(item), "data-category": item.category, class: fresh ? "fresh" : "" },
      h("td", { class: "when", "data-label": "" }, h("time", { datetime: item.timestamp, text: fmt.stamp(item.timestamp) })),
      h("td", { "data-label": "" }, h("span", { class: `chip cat-${item.category}`, text: item.category })),
      h("td", { class: "type", "data-label": "Type", text: Live.label(item) }),
      h("td", { "data-label": "Seat" }, item.agent_handle ? h("a", { href: links.seat(item.agent_handle), text: item.agent_handle }) : ""),
      h("td", { "data-label": "" }, h("a", { class: "summary", href: links.event(item.id), text: item.summary || item.type }),
        Live.INSPECTABLE.has(item.type) ? [" ", h("a", { class: "inspect", href: links.inspect(item.id), text: "inspect →" })] : []),
      h("td", { "data-label": "Trace" }, item.trace_id ? h("a", { class: "trace-link", href: links.trace(item.trace_id), title: item.trace_id, text: fmt.short(item.trace_id) }) : ""));
  }

  async function load(more) {
    const mine = ++generation;
    state.textContent = "reading…";
    try {
      const page = await Live.query("events_page", args(more));
      if (mine !== generation) return;
      Live.coverage(page);
      if (!more) body.replaceChildren();
      for (const item of page.items) body.append(row(item, false));
      cursor = page.next_cursor;
      older.hidden = !cursor;
      const shown = body.children.length;
      state.textContent = shown ? `${shownText(shown)}${cursor ? "" : shown === 1 ? " (the only one)" : " (that is all of them)"}` : "No event matches these filters.";
    } catch (err) {
      if (mine !== generation) return;
      state.textContent = `The store refused this query: ${err.detail || err.message}`;
      state.dataset.level = "error";
    }
  }

  function apply() {
    filters.type = form.elements.type.value.trim();
    filters.agent = form.elements.agent.value;
    filters.window = form.elements.window.value;
    filters.trace_id = form.elements.trace_id.value.trim();
    writeUrl();
    showFilters();
    cursor = null;
    load(false);
  }

  function matches(item) {
    if (!item.category) return false; // live-only types are not in the log
    if (filters.category && item.category !== filters.category) return false;
    if (types().length && !types().includes(Live.label(item))) return false;
    if (filters.trace_id && item.trace_id !== filters.trace_id) return false;
    if (filters.agent) {
      const parties = [item.agent_handle, item.agent_id, item.to_agent_id, item.from_agent_id, ...(item.agent_ids || []), ...(item.participants || [])];
      if (!parties.includes(filters.agent)) return false;
    }
    return true;
  }

  form.addEventListener("submit", (e) => { e.preventDefault(); apply(); });
  for (const el of [form.elements.agent, form.elements.window]) el.addEventListener("change", apply);
  for (const chip of form.querySelectorAll(".chip")) {
    chip.addEventListener("click", () => { filters.category = chip.dataset.category; apply(); });
  }
  older.addEventListener("click", () => load(true));

  Live.on("snapshot", (frame) => {
    for (const seat of frame.seats) ensureSeatOption(seat.handle);
    showFilters();
    cursor = null;
    load(false);
  });

  Live.on("event", (frame) => {
    if (!matches(frame.event)) return;
    if (body.querySelector(`tr[data-event-id="${CSS.escape(frame.event.id)}"]`)) return;
    body.prepend(row(frame.event, true));
    state.textContent = shownText(body.children.length);
  });

  filters = readUrl();
  showFilters();
})();
