"use strict";
/* Overview: "is it healthy", per seat -- its state, its mailbox as the broker counts it (waiting
 * and in flight), how long the oldest message has waited, its dead letters in the last day, the
 * node holding it, its last turn and last error -- with the live activity feed (a ring of the
 * company's last few hundred fed events, a task's text and a turn's reply in it) and the day's
 * turns and tokens. The rows and the feed come from the socket's snapshot and frames; the
 * mailbox figures from the `seats` query (GET /seats's own function) every few seconds. */
(function () {
  const { h, fmt, links } = Live;
  const MAILBOX_POLL_MS = 5000; // the broker's counts move with every delivery; a glance every 5 s
  let feedSize = 300;
  const mailboxes = new Map(); // handle -> the `mailbox` block of GET /seats

  function stateBadge(seat) {
    if (seat.kind !== "agent") return h("span", { class: "state", "data-state": "person", text: "person" });
    const title = seat.stopped ? `stopped: ${seat.stopped.reason}` : seat.paused ? `paused by ${seat.paused.by || "someone"}` : "";
    const text = seat.stopped ? `stopped · ${seat.stopped.reason}` : seat.state;
    return h("span", { class: "state", "data-state": seat.state, title, text });
  }

  function pointer(mark, empty) {
    if (!mark) return h("span", { class: "muted", text: empty });
    return h("span", {},
      h("time", { datetime: mark.at, title: fmt.stamp(mark.at), text: fmt.time(mark.at) }), " ",
      h("a", { href: links.event(mark.event_id), text: mark.summary }));
  }

  function cell(name, label, ...children) {
    return h("td", { class: name, "data-label": label }, ...children);
  }

  function mailboxCells(seat) {
    if (seat.kind !== "agent") return [cell("mailbox", "Mailbox"), cell("oldest", "Oldest"), cell("dead", "Dead, 24 h")];
    const box = mailboxes.get(seat.handle);
    if (!box) return [cell("mailbox", "Mailbox", h("span", { class: "muted", text: "…" })), cell("oldest", "Oldest"), cell("dead", "Dead, 24 h")];
    const busy = box.pending + box.in_flight > 0;
    return [
      cell("mailbox", "Mailbox", h("span", { class: busy ? "" : "muted", title: `${box.pending} waiting, ${box.in_flight} delivered and not yet settled`,
        text: `${fmt.number(box.pending)} / ${fmt.number(box.in_flight)}` })),
      cell("oldest", "Oldest", h("span", { class: box.oldest_age_seconds > 300 ? "warn" : "", text: box.oldest_age_seconds === null ? "—" : fmt.age(box.oldest_age_seconds) })),
      cell("dead", "Dead, 24 h", h("span", { class: box.dead_letters_24h ? "error" : "muted", text: String(box.dead_letters_24h) })),
    ];
  }

  function seatRow(seat) {
    const agent = seat.kind === "agent";
    return h("tr", { "data-seat": seat.handle, "data-state": seat.state || "person" },
      cell("seat", "", h("a", { class: "handle", href: links.seat(seat.handle), text: seat.handle }),
        h("span", { class: "muted role", text: [seat.role, agent ? "" : "(person)"].filter(Boolean).join(" ") })),
      cell("state-cell", "State", stateBadge(seat)),
      ...mailboxCells(seat),
      cell("holder", "Node", agent ? (seat.holder || "—") : ""),
      cell("last-turn", "Last turn", agent ? pointer(seat.last_turn, "none yet") : ""),
      cell("last-error", "Last error", agent ? pointer(seat.last_error, "none") : ""),
      cell("day", "24 h", agent ? `${fmt.number(seat.turns_24h)} · ${fmt.number(seat.tokens_24h)} tok` : ""));
  }

  const rows = new Map(); // handle -> the last row object the socket gave

  function putSeat(seat) {
    rows.set(seat.handle, seat);
    const body = document.querySelector("#seats tbody");
    const row = seatRow(seat);
    const old = body.querySelector(`tr[data-seat="${CSS.escape(seat.handle)}"]`);
    if (old) old.replaceWith(row); else body.append(row);
  }

  function countWorking() {
    const n = document.querySelectorAll('#seats tr[data-state="working"]').length;
    document.querySelector('[data-total="working"]').textContent = String(n);
  }

  function totals(t) {
    if (!t) return;
    document.querySelector('[data-total="turns_24h"]').textContent = fmt.number(t.turns_24h);
    document.querySelector('[data-total="tokens_24h"]').textContent = fmt.number(t.tokens_24h);
  }

  function mailboxTotals() {
    let waiting = 0, dead = 0;
    for (const box of mailboxes.values()) { waiting += box.pending + box.in_flight; dead += box.dead_letters_24h; }
    document.querySelector('[data-total="waiting"]').textContent = fmt.number(waiting);
    const deadEl = document.querySelector('[data-total="dead"]');
    deadEl.textContent = fmt.number(dead);
    deadEl.classList.toggle("error", dead > 0);
  }

  async function readMailboxes() {
    try {
      const answer = await Live.query("seats", {});
      for (const seat of answer.items) if (seat.mailbox) mailboxes.set(seat.handle, seat.mailbox);
      for (const seat of rows.values()) putSeat(seat);
      mailboxTotals();
    } catch (err) {
      Live.note("mailboxes", `The mailbox figures could not be read: ${err.detail || err.message}`);
    }
  }

  function pushFeed(item, fresh) {
    const list = document.getElementById("feed");
    list.prepend(Live.eventItem(item, fresh ? "fresh" : ""));
    while (list.children.length > feedSize) list.lastElementChild.remove();
  }

  Live.on("snapshot", (frame) => {
    feedSize = (frame.projection && frame.projection.feed_size) || feedSize;
    const body = document.querySelector("#seats tbody");
    body.replaceChildren();
    rows.clear();
    for (const seat of frame.seats) putSeat(seat);
    if (!frame.seats.length) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted", text: "the company has no seats (or no revision is active)" })));
    document.getElementById("feed").replaceChildren();
    for (const item of [...frame.feed].reverse()) pushFeed(item, false);
    totals(frame.totals);
    countWorking();
    document.querySelector('[data-live="node"]').textContent = frame.node || "–";
    document.querySelector('[data-live="revision"]').textContent = frame.revision ?? "–";
    const company = document.querySelector('[data-live="company"]');
    if (company && frame.company) company.textContent = frame.company;
    document.querySelector('[data-live="feed-note"]').textContent = `the last ${feedSize} events`;
    readMailboxes();
  });

  Live.on("event", (frame) => {
    for (const seat of frame.seats || []) putSeat(seat);
    if (frame.seats) countWorking();
    totals(frame.totals);
    if (frame.fed) pushFeed(frame.event, true);
  });

  Live.on("seats", (frame) => {
    for (const seat of frame.seats || []) putSeat(seat);
    totals(frame.totals);
    countWorking();
  });

  setInterval(() => { if (document.visibilityState === "visible" && Live.connected()) readMailboxes(); }, MAILBOX_POLL_MS);
})();
