"use strict";
/* The /ws/stream client (seed 000, "Broadcast Streams"): one socket per tab.
 *
 * Live.on(type, fn)      frames by type: snapshot, event, seats, gap, closing
 * Live.query(name, args) a Promise of a REST route's answer, over the same socket
 * Live.h / Live.fmt ...  small DOM and format helpers the page scripts share
 *
 * When the socket drops, the page says so and reconnects with backoff (0.5 s doubling to
 * 30 s, jittered); a reconnect brings a fresh snapshot, which replaces what the page shows.
 * Queries asked while it is down wait and are sent on the next connection.
 */
(function () {
  const listeners = {};
  const pending = new Map();
  let socket = null;
  let nextId = 1;
  let attempt = 0;
  let retryAt = 0;
  let ticker = null;
  let missedTotal = 0;

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key === "text") el.textContent = value;
      else if (key.startsWith("data-")) el.setAttribute(key, value);
      else if (key in el && typeof value !== "string") el[key] = value;
      else el.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  const fmt = {
    time(iso) {
      if (!iso) return "";
      const d = new Date(iso);
      if (isNaN(d)) return String(iso);
      const today = new Date();
      const sameDay = d.toDateString() === today.toDateString();
      const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      return sameDay ? t : `${d.toLocaleDateString()} ${t}`;
    },
    number(n) { return (n || 0).toLocaleString(); },
    short(id) { return id ? String(id).slice(0, 8) : ""; },
  };

  const links = {
    event: (id) => `/dashboard/events/${encodeURIComponent(id)}/`,
    inspect: (id) => `/dashboard/events/${encodeURIComponent(id)}/inspect/`,
    trace: (id) => `/dashboard/traces/${encodeURIComponent(id)}/`,
    seat: (handle) => `/dashboard/seats/${encodeURIComponent(handle)}/`,
  };
  const INSPECTABLE = new Set(["agent_turn_completed", "agent_turn_started", "agent_phase_completed"]);

  function seatOf(item) {
    return item.agent_handle || "";
  }

  /* The name a row is filed under: its type, or an inbound delivery's own label (webhook:<event>). */
  function label(item) {
    return item.type === "inbound_delivery" && item.label ? item.label : item.type;
  }

  /* One event as a list row: time, category chip, summary (a link to its detail). */
  function eventItem(item, extra) {
    const row = h("li", { "data-event-id": item.id, "data-type": label(item), class: extra || "" },
      h("time", { datetime: item.timestamp, text: fmt.time(item.timestamp) }), " ",
      item.category ? h("span", { class: `chip cat-${item.category}`, text: item.category }) : h("span", { class: "chip live-only", text: "live" }), " ",
      item.category ? h("a", { href: links.event(item.id), text: item.summary || item.type }) : h("span", { text: item.summary || item.type }));
    const seat = seatOf(item);
    if (seat) row.append(" ", h("a", { class: "seat-link", href: links.seat(seat), text: `@${seat}` }));
    if (INSPECTABLE.has(item.type) && item.category) row.append(" ", h("a", { class: "inspect", href: links.inspect(item.id), text: "inspect →" }));
    return row;
  }

  function statusEl() { return document.getElementById("live-status"); }

  function setStatus(state, text) {
    const el = statusEl();
    if (!el) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  /* A note at the top of the page, one per kind, replaced when said again. */
  function note(kind, text, level) {
    const box = document.getElementById("live-notes");
    if (!box) return;
    let el = box.querySelector(`[data-note="${kind}"]`);
    if (!text) { if (el) el.remove(); return; }
    if (!el) {
      el = h("div", { class: "note", "data-note": kind });
      box.append(el);
    }
    el.dataset.level = level || "warn";
    el.replaceChildren(h("span", { text }), " ",
      h("button", { type: "button", class: "dismiss", text: "dismiss", onclick: () => el.remove() }));
  }

  function emit(type, frame) {
    for (const fn of listeners[type] || []) {
      try { fn(frame); } catch (err) { console.error("live: a page handler failed", err); }
    }
  }

  function route(frame) {
    if (frame.type === "answer" || frame.type === "error") {
      const waiting = pending.get(frame.id);
      if (!waiting) return;
      pending.delete(frame.id);
      if (frame.type === "answer") waiting.resolve(frame.result);
      else waiting.reject(Object.assign(new Error(frame.detail), { status: frame.status, detail: frame.detail }));
      return;
    }
    if (frame.type === "snapshot") {
      missedTotal = 0;
      note("gap", null);
      const p = frame.projection || {};
      note("history", p.history && p.history !== "ok" ? `This node could not read its event history (${p.history}): the feed and the day's totals start from when it did.` : null);
      note("projection", p.missed ? `The node's live view lost ${p.missed} events and re-read its history; recent state may lag.` : null);
    }
    if (frame.type === "gap") {
      missedTotal += frame.missed || 0;
      const where = frame.where === "projection" ? "The node's live view" : "This tab";
      note("gap", `${where} fell behind and missed ${fmt.number(missedTotal)} events; the feed is incomplete. Reload for a fresh snapshot.`);
    }
    if (frame.type === "closing") note("socket", "The node is draining; reconnecting…");
    if (frame.type === "unavailable") note("socket", frame.detail || "This node serves no live view.", "error");
    emit(frame.type, frame);
  }

  function url() {
    return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws/stream`;
  }

  function connect() {
    clearInterval(ticker);
    setStatus("connecting", attempt ? "reconnecting…" : "connecting…");
    const ws = new WebSocket(url());
    socket = ws;
    ws.onopen = () => {
      attempt = 0;
      setStatus("live", "live");
      note("socket", null);
      for (const waiting of pending.values()) ws.send(waiting.text);
    };
    ws.onmessage = (message) => {
      let parsed;
      try { parsed = JSON.parse(message.data); } catch (err) { return; }
      // One frame, or several that waited together, in order.
      for (const frame of Array.isArray(parsed) ? parsed : [parsed]) route(frame);
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      socket = null;
      reconnectLater();
    };
  }

  function reconnectLater() {
    attempt += 1;
    const base = Math.min(30000, 500 * 2 ** Math.min(attempt - 1, 6));
    const delay = base * (0.8 + Math.random() * 0.4);
    retryAt = Date.now() + delay;
    note("socket", "The live connection dropped: what this page shows may be out of date. Reconnecting…", "error");
    const tick = () => setStatus("down", `offline, retrying in ${Math.max(0, Math.ceil((retryAt - Date.now()) / 1000))} s`);
    tick();
    clearInterval(ticker);
    ticker = setInterval(tick, 1000);
    emit("down", { attempt });
    setTimeout(connect, delay);
  }

  function query(name, args) {
    const id = nextId++;
    const text = JSON.stringify({ id, query: name, args: args || {} });
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject, text });
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(text);
    });
  }

  function on(type, fn) {
    (listeners[type] = listeners[type] || []).push(fn);
  }

  /* Times a template rendered as ISO text read as the page's own times do. */
  function localTimes() {
    for (const el of document.querySelectorAll("time[datetime]")) {
      if (el.textContent.trim() === el.getAttribute("datetime")) el.textContent = fmt.time(el.getAttribute("datetime"));
    }
  }

  /* Coverage (seed 000, "Reading the fleet's history": "Every answer says who answered"): a
   * history answer from fewer than every live node is shown as such in `el`, naming each node
   * that did not answer and why; a complete answer hides it. */
  function coverage(el, answer) {
    const cov = answer && answer.coverage;
    if (!el || !cov || cov.complete) { if (el) { el.hidden = true; el.replaceChildren(); } return; }
    const missing = cov.nodes.filter((n) => !n.answered);
    el.replaceChildren(h("strong", { text: "Partial history: " }),
      `${cov.nodes.length - missing.length} of ${cov.nodes.length} nodes answered; what these hold is not shown: `,
      ...missing.flatMap((n, i) => [i ? "; " : "", h("code", { text: n.id }), n.error ? ` (${n.error})` : ""]));
    el.hidden = false;
  }

  window.Live = { on, query, h, fmt, links, note, eventItem, label, coverage, INSPECTABLE };
  document.addEventListener("DOMContentLoaded", () => { localTimes(); connect(); });
})();
