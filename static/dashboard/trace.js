"use strict";
/* Trace view (seed 002, "Dashboard Trace View"; seed 000, "Distributed Tracing"): one trace's
 * events as a tree by parent span. The root event (a webhook's, say) is the header; the rest
 * nest beneath it with connecting lines, each span collapsible; `inspect →` on LLM turn
 * events; a notification skip shows its reason inline. It reads the `trace` query (GET
 * /events/trace/{id}'s own function) and reads again when an event of this trace arrives. */
(function () {
  const { h, fmt, links } = Live;
  const root = document.getElementById("trace");
  const traceId = root.dataset.traceId;
  const header = document.getElementById("trace-header");
  const tree = document.getElementById("trace-tree");
  let timer = null;

  /* Spans in first-seen order; each holds its events (oldest first) and its child spans. */
  function build(items) {
    const spans = new Map();
    for (const e of items) {
      const key = e.span_id || `event:${e.id}`;
      let span = spans.get(key);
      if (!span) {
        span = { key, parent: e.parent_span_id || "", events: [], children: [] };
        spans.set(key, span);
      }
      if (!span.parent && e.parent_span_id) span.parent = e.parent_span_id;
      span.events.push(e);
    }
    const roots = [];
    for (const span of spans.values()) {
      const parent = span.parent && span.parent !== span.key ? spans.get(span.parent) : null;
      if (parent) parent.children.push(span); else roots.push(span);
    }
    return roots;
  }

  function skipReason(e) {
    if (e.type !== "notification_skipped") return null;
    return h("span", { class: "skip-reason" }, "skipped: ", h("strong", { text: e.reason || "no reason given" }),
      e.detail ? ` (${e.detail})` : "");
  }

  function line(e) {
    return h("div", { class: "trace-event", "data-event-id": e.id, "data-type": Live.label(e) },
      h("time", { datetime: e.timestamp, text: fmt.time(e.timestamp) }), " ",
      h("span", { class: `chip cat-${e.category}`, text: Live.label(e) }), " ",
      h("a", { href: links.event(e.id), text: e.summary || e.type }), " ",
      skipReason(e),
      Live.INSPECTABLE.has(e.type) ? h("a", { class: "inspect", href: links.inspect(e.id), text: "inspect →" }) : null);
  }

  function spanNode(span, seen) {
    if (seen.has(span.key)) return null; // a malformed parent loop is drawn once
    seen.add(span.key);
    const children = span.children.map((c) => spanNode(c, seen)).filter(Boolean);
    const head = h("summary", {}, span.events.map(line));
    const body = children.length ? h("ul", { class: "tree" }, children) : null;
    return h("li", { class: "span", "data-span": span.key }, h("details", { open: true }, head, body));
  }

  function render(items) {
    if (!items.length) {
      header.replaceChildren(h("p", { class: "muted", text: "No node holds an event of this trace (yet)." }));
      tree.replaceChildren();
      return;
    }
    const roots = build(items);
    // The header is what the trace began with: the delivery a webhook edge recorded when there
    // is one (webhook.receive's span), else the root span's first event.
    const first = roots[0].events.find((e) => e.type === "inbound_delivery") || roots[0].events[0];
    header.replaceChildren(
      h("p", { class: "trace-root" }, h("span", { class: `chip cat-${first.category}`, text: Live.label(first) }), " ",
        h("a", { href: links.event(first.id), text: first.summary || first.type })),
      h("p", { class: "muted", text: `${items.length} events, ${fmt.time(items[0].timestamp)} to ${fmt.time(items[items.length - 1].timestamp)}` }));
    const seen = new Set();
    tree.replaceChildren(h("ul", { class: "tree top" }, roots.map((r) => spanNode(r, seen)).filter(Boolean)));
  }

  async function load() {
    try {
      const answer = await Live.query("trace", { trace_id: traceId });
      Live.coverage(document.getElementById("coverage"), answer);
      render(answer.items);
    } catch (err) {
      header.replaceChildren(h("p", { class: "error", text: `The trace could not be read: ${err.detail || err.message}` }));
    }
  }

  Live.on("snapshot", load);
  Live.on("event", (frame) => {
    if (frame.event.trace_id !== traceId || !frame.event.category) return;
    clearTimeout(timer);
    timer = setTimeout(load, 300); // a burst of one trace's events is one read
  });
})();
