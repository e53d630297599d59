"use strict";
/* The /ws/stream client (seed 000, "Broadcast Streams"): one socket per tab.
 *
 * Live.on(type, fn)      frames by type: snapshot, event, seats, gap, closing
 * Live.query(name, args) a Promise of a REST route's answer, over the same socket
 * Live.h / Live.fmt ...  small DOM and format helpers the page scripts share
 *
 * When the socket drops, the page says so and reconnects with backoff (0.5 s doubling to
 * 30 s, jittered); "retry now" reconnects at once, and while it is down the page asks /ready
 * every second, reconnecting the moment the node answers. A reconnect brings a fresh
 * snapshot, which replaces what the page shows. Queries asked while it is down wait and are
 * sent on the next connection.
 */
(function () {
  const listeners = {};
  const pending = new Map();
  let socket = null;
  let nextId = 1;
  let attempt = 0;
  let retryAt = 0;
  let ticker = null;
  let retryTimer = null;
  let readyProbe = null;
  let missedTotal = 0;
  const READY_POLL_MS = 1000; // while down: a cheap probe, so a node that is back is seen at once

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

  const pad = (n, w) => String(n).padStart(w || 2, "0");
  const fmt = {
    /* A time of day, with the date when it is not today: the feed's and the tables' times. */
    time(iso) {
      if (!iso) return "";
      const d = new Date(iso);
      if (isNaN(d)) return String(iso);
      const today = new Date();
      const sameDay = d.toDateString() === today.toDateString();
      const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      return sameDay ? t : `${fmt.date(d)} ${t}`;
    },
    date(d) { return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`; },
    /* The full local date and time to the millisecond: the event log's and the trace's times. */
    stamp(iso) {
      if (!iso) return "";
      const d = new Date(iso);
      if (isNaN(d)) return String(iso);
      return `${fmt.date(d)} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
    },
    /* A duration a person reads at a glance: 840 ms, 4.2 s, 3.5 min, 1.2 h. */
    ms(value) {
      if (value === null || value === undefined || isNaN(value)) return "";
      const n = Number(value);
      if (n === 0) return "0 ms";
      if (n < 1) return `${n.toFixed(2)} ms`;
      if (n < 1000) return `${Math.round(n)} ms`;
      if (n < 60e3) return `${(n / 1000).toFixed(1)} s`;
      if (n < 3600e3) return `${(n / 60e3).toFixed(1)} min`;
      return `${(n / 3600e3).toFixed(1)} h`;
    },
    age(seconds) { return seconds === null || seconds === undefined ? "" : fmt.ms(seconds * 1000); },
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

  /* Agent turns have a group of their own on the screens (their stored category is `system`,
   * as the seeds file them; the store and the log's filter keep that). */
  const TURN_TYPES = new Set(["agent_turn_started", "agent_turn_completed", "agent_turn_stopped", "agent_turn_steered",
    "agent_phase_started", "agent_phase_completed", "turn.guard_breach"]);
  function group(item) {
    return TURN_TYPES.has(item.type) ? "turn" : item.category;
  }

  /* What was said, for the rows whose words matter: a task's text, a turn's reply. */
  function said(item) {
    if (item.type === "task_assigned" && item.task) return { part: "task-text", text: item.task };
    if (item.type === "agent_turn_completed" && item.response) return { part: "turn-reply", text: item.response };
    return null;
  }

  function failedTurn(item) {
    return item.type === "turn.guard_breach" || (item.type === "agent_turn_completed" && (item.failed || ["failed", "llm_unavailable", "budget_exhausted"].includes(item.outcome)));
  }

  /* One event as a list row: time, group chip, summary (a link to its detail), and what was said. */
  function eventItem(item, extra) {
    const kind = group(item);
    const classes = [extra || "", failedTurn(item) ? "failed" : ""].filter(Boolean).join(" ");
    const row = h("li", { "data-event-id": item.id, "data-type": label(item), "data-group": kind || "live", class: classes },
      h("time", { datetime: item.timestamp, title: fmt.stamp(item.timestamp), text: fmt.time(item.timestamp) }), " ",
      kind ? h("span", { class: `chip cat-${kind}`, text: kind }) : h("span", { class: "chip live-only", text: "live" }), " ",
      item.category ? h("a", { href: links.event(item.id), text: item.summary || item.type }) : h("span", { text: item.summary || item.type }));
    const seat = seatOf(item);
    if (seat) row.append(" ", h("a", { class: "seat-link", href: links.seat(seat), text: `@${seat}` }));
    if (item.trace_id && item.category) row.append(" ", h("a", { class: "trace-link", href: links.trace(item.trace_id), title: `trace ${item.trace_id}`, text: "trace →" }));
    if (INSPECTABLE.has(item.type) && item.category) row.append(" ", h("a", { class: "inspect", href: links.inspect(item.id), text: "inspect →" }));
    const words = said(item);
    if (words) row.append(h("blockquote", { class: "said", "data-part": words.part, text: words.text }));
    return row;
  }

  /* issue: a fleet's read may be partial; an answer saying so is shown where the page keeps its note. */
  function coverage(answer) {
    const el = document.querySelector("[data-coverage]");
    if (!el) return;
    const cov = answer && answer.coverage;
    if (cov && cov.complete === false) {
      const missing = (cov.missing || cov.unanswered || []).join(", ");
      el.textContent = `This answer is partial: not every data node answered${missing ? ` (${missing})` : ""}; rows they hold are missing.`;
      el.hidden = false;
    } else {
      el.hidden = true;
    }
  }

  function statusEl() { return document.getElementById("live-status"); }

  function setStatus(state, text) {
    const el = statusEl();
    if (!el) return;
    el.dataset.state = state;
    el.textContent = text;
  }

  /* A note at the top of the page, one per kind, replaced when said again; `action` adds a button. */
  function note(kind, text, level, action) {
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
      action ? h("button", { type: "button", class: "note-action", text: action.text, onclick: action.onclick }) : null,
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

  function retryButton(show) {
    const button = document.getElementById("live-retry");
    if (button) button.hidden = !show;
  }

  function stopWaiting() {
    clearInterval(ticker);
    clearTimeout(retryTimer);
    clearInterval(readyProbe);
    ticker = retryTimer = readyProbe = null;
  }

  function connect() {
    stopWaiting();
    retryButton(false);
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

  function retryNow() {
    if (socket) return;
    connect();
  }

  /* While down: ask /ready each second; the node answering 200 is the moment to reconnect. */
  async function probeReady() {
    try {
      const answer = await fetch("/ready", { cache: "no-store", credentials: "same-origin" });
      if (answer.ok && !socket) retryNow();
    } catch (err) { /* still down */ }
  }

  function reconnectLater() {
    attempt += 1;
    const base = Math.min(30000, 500 * 2 ** Math.min(attempt - 1, 6));
    const delay = base * (0.8 + Math.random() * 0.4);
    retryAt = Date.now() + delay;
    note("socket", "The live connection dropped: what this page shows may be out of date. Reconnecting by itself (or: retry now, at the top).", "error");
    const tick = () => setStatus("down", `offline, retrying in ${Math.max(0, Math.ceil((retryAt - Date.now()) / 1000))} s`);
    stopWaiting();
    tick();
    retryButton(true);
    ticker = setInterval(tick, 1000);
    readyProbe = setInterval(probeReady, READY_POLL_MS);
    emit("down", { attempt });
    retryTimer = setTimeout(connect, delay);
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
      if (el.textContent.trim() === el.getAttribute("datetime")) {
        el.textContent = el.dataset.format === "stamp" ? fmt.stamp(el.getAttribute("datetime")) : fmt.time(el.getAttribute("datetime"));
        el.title = fmt.stamp(el.getAttribute("datetime"));
      }
    }
  }

  function connected() { return !!socket && socket.readyState === WebSocket.OPEN; }

  window.Live = { on, query, connected, h, fmt, links, note, eventItem, label, group, said, coverage, INSPECTABLE };
  document.addEventListener("DOMContentLoaded", () => {
    localTimes();
    const button = document.getElementById("live-retry");
    if (button) button.addEventListener("click", retryNow);
    connect();
  });
})();
