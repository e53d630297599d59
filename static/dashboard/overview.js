"use strict";
/* Overview: every seat with its state, holding node, last turn and last error; the live
 * activity feed (a ring of the company's last few hundred fed events); the day's turns and
 * tokens. Everything here comes from the socket's snapshot and frames. */
(function () {
  const { h, fmt, links } = Live;
  let feedSize = 300;

  function stateBadge(seat) {
    if (seat.kind !== "agent") return h("span", { class: "state", "data-state": "person", text: "person" });
    const title = seat.stopped ? `stopped: ${seat.stopped.reason}` : seat.paused ? `paused by ${seat.paused.by || "someone"}` : "";
    const text = seat.stopped ? `stopped · ${seat.stopped.reason}` : seat.state;
    return h("span", { class: "state", "data-state": seat.state, title, text });
  }

  function pointer(mark, empty) {
    if (!mark) return h("span", { class: "muted", text: empty });
    return h("span", {},
      h("time", { datetime: mark.at, text: fmt.time(mark.at) }), " ",
      h("a", { href: links.event(mark.event_id), text: mark.summary }));
  }

  function seatRow(seat) {
    const agent = seat.kind === "agent";
    return h("tr", { "data-seat": seat.handle, "data-state": seat.state || "person" },
      h("td", {}, h("a", { class: "handle", href: links.seat(seat.handle), text: seat.handle })),
      h("td", { text: [seat.role, agent ? "" : "(person)"].filter(Boolean).join(" ") }),
      h("td", { class: "state-cell" }, stateBadge(seat)),
      h("td", { class: "holder", text: agent ? (seat.holder || "—") : "" }),
      h("td", { class: "last-turn" }, agent ? pointer(seat.last_turn, "none yet") : ""),
      h("td", { class: "last-error" }, agent ? pointer(seat.last_error, "none") : ""),
      h("td", { class: "day", text: agent ? `${fmt.number(seat.turns_24h)} · ${fmt.number(seat.tokens_24h)} tok` : "" }));
  }

  function putSeat(seat) {
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

  function pushFeed(item, fresh) {
    const list = document.getElementById("feed");
    list.prepend(Live.eventItem(item, fresh ? "fresh" : ""));
    while (list.children.length > feedSize) list.lastElementChild.remove();
  }

  Live.on("snapshot", (frame) => {
    feedSize = (frame.projection && frame.projection.feed_size) || feedSize;
    const body = document.querySelector("#seats tbody");
    body.replaceChildren();
    for (const seat of frame.seats) putSeat(seat);
    if (!frame.seats.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted", text: "the company has no seats (or no revision is active)" })));
    document.getElementById("feed").replaceChildren();
    for (const item of [...frame.feed].reverse()) pushFeed(item, false);
    totals(frame.totals);
    countWorking();
    document.querySelector('[data-live="node"]').textContent = frame.node || "–";
    document.querySelector('[data-live="revision"]').textContent = frame.revision ?? "–";
    const company = document.querySelector('[data-live="company"]');
    if (company && frame.company) company.textContent = frame.company;
    document.querySelector('[data-live="feed-note"]').textContent = `the last ${feedSize} events`;
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
})();
