"use strict";
/* Seat page: the seat's live row (state, node, pause, last turn and error), its mailbox depth
 * from the `seat` query (GET /seats/{handle}'s own function) every few seconds, and its events
 * as they happen. Pause and resume are plain CSRF-protected forms. */
(function () {
  const { h, fmt } = Live;
  const panel = document.getElementById("seat");
  const handle = panel.dataset.handle;
  const MAILBOX_POLL_MS = 5000; // the depth moves with every delivery; a glance every 5 s is enough

  function field(name) { return panel.querySelector(`[data-field="${name}"]`); }

  function show(seat) {
    if (seat.handle !== handle || seat.kind !== "agent") return;
    const state = field("state");
    state.dataset.state = seat.state;
    state.textContent = seat.stopped ? `stopped · ${seat.stopped.reason}` : seat.state;
    field("holder").textContent = seat.holder || "none holds it";
    field("paused").textContent = seat.paused ? `by ${seat.paused.by || "someone"}${seat.paused.reason ? ": " + seat.paused.reason : ""}` : "no";
    field("last_turn").textContent = seat.last_turn ? seat.last_turn.summary : "none yet";
    field("last_error").textContent = seat.last_error ? seat.last_error.summary : "none";
    field("day").textContent = `${fmt.number(seat.turns_24h)} turns, ${fmt.number(seat.tokens_24h)} tokens`;
  }

  function mine(item) {
    return item.agent_handle === handle;
  }

  function prepend(listId, item) {
    const list = document.getElementById(listId);
    if (list.querySelector(`[data-event-id="${CSS.escape(item.id)}"]`)) return;
    const placeholder = list.querySelector(".placeholder");
    if (placeholder) placeholder.remove();
    list.prepend(Live.eventItem(item, "fresh"));
    while (list.children.length > 50) list.lastElementChild.remove();
  }

  async function mailbox() {
    if (panel.dataset.kind !== "agent") return;
    try {
      const detail = await Live.query("seat", { handle });
      const depth = detail.mailbox_depth ?? (detail.mailbox && detail.mailbox.depth);
      field("mailbox").textContent = depth === undefined || depth === null ? "unknown" : fmt.number(depth);
      const holds = detail.holds || [];
      field("holds").textContent = holds.length ? holds.join(", ") : "none";
    } catch (err) {
      field("mailbox").textContent = `unknown (${err.detail || err.message})`;
    }
  }

  Live.on("snapshot", (frame) => {
    for (const seat of frame.seats) show(seat);
    mailbox();
  });
  Live.on("seats", (frame) => { for (const seat of frame.seats || []) show(seat); });
  Live.on("event", (frame) => {
    for (const seat of frame.seats || []) show(seat);
    const item = frame.event;
    if (!mine(item) || !item.category) return;
    prepend("seat-events", item);
    if (item.type === "agent_turn_completed") prepend("seat-turns", item);
  });
  setInterval(() => { if (document.visibilityState === "visible") mailbox(); }, MAILBOX_POLL_MS);
})();
