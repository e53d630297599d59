"use strict";
/* Seat page: the seat's live row (state, node, pause, last turn and error), its mailbox as the
 * broker counts it from the `seat` query (GET /seats/{handle}'s own function) every few
 * seconds, its turns (outcome, duration, tokens, trigger) and its events as they happen -- a
 * task's text when it is assigned, the turn's reply when it completes. The task box posts to
 * the page's own CSRF-protected route (what POST /seats/{handle}/tasks calls) and stays on the
 * page; without this script it is a plain form. Pause and Resume are enabled by the state. */
(function () {
  const { h, fmt, links } = Live;
  const panel = document.getElementById("seat");
  const handle = panel.dataset.handle;
  const MAILBOX_POLL_MS = 5000; // the depth moves with every delivery; a glance every 5 s is enough
  let paused = null;

  function field(name) { return panel.querySelector(`[data-field="${name}"]`); }
  function set(name, text) { const el = field(name); if (el) el.textContent = text; }

  /* Pause is for a seat that is not paused (or, ticking "stop the running turn", one paused
   * without it); Resume for a paused one. */
  function buttons() {
    const pause = panel.querySelector('button[data-action="pause"]');
    const resume = panel.querySelector('button[data-action="resume"]');
    if (!pause || !resume) return;
    const stop = panel.querySelector('input[name="stop_running"]');
    pause.disabled = !!paused && !(stop && stop.checked && !paused.stop_running);
    resume.disabled = !paused;
  }

  function show(seat) {
    if (seat.handle !== handle || seat.kind !== "agent") return;
    const state = field("state");
    state.dataset.state = seat.state;
    state.textContent = seat.stopped ? `stopped · ${seat.stopped.reason}` : seat.state;
    set("holder", seat.holder || "none holds it");
    set("paused", seat.paused ? `by ${seat.paused.by || "someone"}${seat.paused.reason ? ": " + seat.paused.reason : ""}` : "no");
    set("last_turn", seat.last_turn ? seat.last_turn.summary : "none yet");
    set("last_error", seat.last_error ? seat.last_error.summary : "none");
    set("day", `${fmt.number(seat.turns_24h)} turn${seat.turns_24h === 1 ? "" : "s"}, ${fmt.number(seat.tokens_24h)} tokens`);
    paused = seat.paused || null;
    buttons();
  }

  function prependEvent(item) {
    const list = document.getElementById("seat-events");
    if (list.querySelector(`[data-event-id="${CSS.escape(item.id)}"]`)) return;
    const placeholder = list.querySelector(".placeholder");
    if (placeholder) placeholder.remove();
    list.prepend(Live.eventItem(item, "fresh"));
    while (list.children.length > 50) list.lastElementChild.remove();
  }

  function turnRow(item) {
    const outcome = item.outcome || (item.failed ? "failed" : "completed");
    const failed = ["failed", "llm_unavailable", "budget_exhausted"].includes(outcome) || item.failed;
    return h("tr", { "data-event-id": item.id, "data-outcome": outcome, class: `fresh${failed ? " failed" : ""}` },
      h("td", { "data-label": "" }, h("time", { datetime: item.timestamp, title: fmt.stamp(item.timestamp), text: fmt.time(item.timestamp) })),
      h("td", { "data-label": "" }, h("span", { class: "outcome", "data-outcome": outcome, text: outcome }),
        item.error ? [" ", h("span", { class: "error", text: String(item.error).slice(0, 80) })] : []),
      h("td", { class: "num", "data-label": "Took", "data-ms": item.duration_ms || 0, text: fmt.ms(item.duration_ms || 0) }),
      h("td", { class: "num", "data-label": "Tokens in / out", text: `${fmt.number(item.tokens_in)} / ${fmt.number(item.tokens_out)}` }),
      h("td", { "data-label": "Trigger" }, item.trigger_id ? h("a", { href: links.event(item.trigger_id), text: item.trigger_type || "trigger" }) : (item.trigger_type || "")),
      h("td", { class: "reply", "data-label": "Reply", text: String(item.response || "").slice(0, 120) }),
      h("td", { class: "links", "data-label": "" }, item.trace_id ? h("a", { href: links.trace(item.trace_id), text: "trace →" }) : "", " ",
        h("a", { class: "inspect", href: links.inspect(item.id), text: "inspect →" })));
  }

  function prependTurn(item) {
    const body = document.querySelector("#seat-turns tbody");
    if (!body || body.querySelector(`[data-event-id="${CSS.escape(item.id)}"]`)) return;
    const placeholder = body.querySelector(".placeholder");
    if (placeholder) placeholder.remove();
    body.prepend(turnRow(item));
    while (body.children.length > 50) body.lastElementChild.remove();
  }

  /* Durations the template rendered in milliseconds, read as the page's own. */
  for (const cell of document.querySelectorAll("#seat-turns td[data-ms]")) cell.textContent = fmt.ms(Number(cell.dataset.ms));

  async function mailbox() {
    if (panel.dataset.kind !== "agent") return;
    try {
      const detail = await Live.query("seat", { handle });
      const box = detail.mailbox;
      set("mailbox", box ? `${fmt.number(box.pending)} waiting, ${fmt.number(box.in_flight)} in flight` : "unknown");
      set("oldest", !box ? "unknown" : box.oldest_age_seconds === null ? "nothing waits" : fmt.age(box.oldest_age_seconds));
      set("dead", box ? String(box.dead_letters_24h) : "unknown");
      const holds = detail.holds || [];
      set("holds", holds.length ? holds.join(", ") : "none");
    } catch (err) {
      set("mailbox", `unknown (${err.detail || err.message})`);
    }
  }

  /* The task box: the route's answer, its trace one click away; the task and its reply then
   * arrive over the socket like every other event. */
  const form = document.getElementById("task-form");
  if (form) {
    const result = document.getElementById("task-result");
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const text = form.elements.text.value.trim();
      if (!text) return;
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      result.dataset.level = "";
      result.textContent = "giving the task…";
      try {
        const answer = await fetch(form.action, {
          method: "POST", body: new FormData(form), credentials: "same-origin",
          headers: { Accept: "application/json", "X-CSRFToken": form.elements.csrfmiddlewaretoken.value },
        });
        const body = await answer.json().catch(() => ({ detail: `the node answered ${answer.status}` }));
        if (answer.status === 202) {
          form.elements.text.value = "";
          result.replaceChildren(`${handle} has it (task ${fmt.short(body.task_id)}). `,
            h("a", { href: links.trace(body.trace_id), "data-trace-id": body.trace_id, text: "follow its trace →" }));
        } else {
          result.dataset.level = "error";
          result.textContent = body.detail || `refused (${answer.status})`;
        }
      } catch (err) {
        result.dataset.level = "error";
        result.textContent = `the node did not answer: ${err.message}`;
      } finally {
        button.disabled = false;
      }
    });
  }
  const stop = panel.querySelector('input[name="stop_running"]');
  if (stop) stop.addEventListener("change", buttons);

  Live.on("snapshot", (frame) => {
    for (const seat of frame.seats) show(seat);
    mailbox();
  });
  Live.on("seats", (frame) => { for (const seat of frame.seats || []) show(seat); });
  Live.on("event", (frame) => {
    for (const seat of frame.seats || []) show(seat);
    const item = frame.event;
    if (item.agent_handle !== handle || !item.category) return;
    prependEvent(item);
    if (item.type === "agent_turn_completed") prependTurn(item);
  });
  setInterval(() => { if (document.visibilityState === "visible" && Live.connected()) mailbox(); }, MAILBOX_POLL_MS);
})();
