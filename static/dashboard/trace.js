"use strict";
/* Trace view (seed 002, "Dashboard Trace View"; seed 000, "Distributed Tracing"): one trace as a
 * waterfall. The tree is the server's (dashboard/waterfall.py: webhook -> notification or task
 * -> turn -> phase -> rounds -> tool calls), each row with its start and duration on the
 * trace's own clock; this draws it: a bar per span, a diamond per instant, failures and guard
 * breaches in red, skip reasons inline, and a click on a row opens what it said (the prompt and
 * reply of a turn, a phase's prompts, a round's text, a tool call's arguments and result).
 *
 * It reads the `waterfall` query and reads again when an event of this trace arrives (or an
 * agent_turn_progress frame of it, live only); a turn still running grows to "now". */
(function () {
  const { h, fmt, links } = Live;
  const root = document.getElementById("trace");
  const traceId = root.dataset.traceId;
  const header = document.getElementById("trace-header");
  const chart = document.getElementById("waterfall");
  const open = new Set();      // rows whose detail is open, kept across re-reads
  const collapsed = new Set(); // rows whose children are hidden
  let timer = null;
  let current = null;
  let clock = null;

  const KIND_LABEL = { webhook: "webhook", notification: "notification", task: "task", turn: "turn", phase: "phase",
    round: "round", tool: "tool", event: "event" };

  function scaleOf(data) {
    const running = walk(data.rows).some((r) => r.status === "running");
    const started = data.started_at ? new Date(data.started_at).getTime() : Date.now();
    const total = Math.max(data.duration_ms || 0, running ? Date.now() - started : 0, 1);
    return { total, started };
  }

  function* walkGen(rows) { for (const r of rows) { yield r; yield* walkGen(r.children || []); } }
  function walk(rows) { return [...walkGen(rows)]; }

  function durationOf(row, scale) {
    if (row.status === "running") return Math.max(Date.now() - scale.started - row.start_ms, row.duration_ms || 0);
    return row.duration_ms;
  }

  /* The bar (or the diamond of an instant), placed with CSS properties the sheet reads. */
  function timing(row, scale) {
    const track = h("div", { class: "wf-track" });
    const took = durationOf(row, scale);
    const left = (row.start_ms / scale.total) * 100;
    if (took === null || took === undefined) {
      const mark = h("span", { class: "wf-mark", title: `at +${fmt.ms(row.start_ms)}` });
      mark.style.setProperty("--left", `${Math.min(left, 100)}%`);
      track.append(mark);
    } else {
      const bar = h("span", { class: "wf-bar", title: `+${fmt.ms(row.start_ms)}, took ${fmt.ms(took)}` });
      bar.style.setProperty("--left", `${Math.min(left, 100)}%`);
      bar.style.setProperty("--width", `${Math.max((took / scale.total) * 100, 0.4)}%`);
      track.append(bar);
    }
    const figure = took === null || took === undefined ? `+${fmt.ms(row.start_ms)}` : fmt.ms(took);
    return h("div", { class: "wf-time" }, track, h("span", { class: "wf-took", "data-took": took ?? "", text: figure }));
  }

  function textBlock(title, text, part) {
    if (text === undefined || text === null || text === "") return null;
    const shown = typeof text === "string" ? text : JSON.stringify(text, null, 2);
    return [h("h4", { text: title }), h("pre", { class: "prose", "data-part": part, text: shown })];
  }

  /* What a row said, one click away. */
  function detail(row) {
    const d = row.detail || {};
    const parts = [];
    if (row.kind === "turn") parts.push(textBlock("Prompt", d.prompt, "prompt"), textBlock("Reply", d.reply, "reply"));
    if (row.kind === "phase") parts.push(textBlock("System prompt", d.system_prompt, "system-prompt"),
      textBlock("Prompt", d.user_prompt, "prompt"), textBlock("Response", d.response, "response"));
    if (row.kind === "round") parts.push(textBlock("Text", d.text, "round-text"));
    if (row.kind === "tool") parts.push(textBlock("Arguments", d.arguments, "arguments"), textBlock("Result", d.result, "result"),
      textBlock("Error", d.error, "error"));
    if (row.kind === "task") parts.push(textBlock("Task", d.task, "task"));
    const facts = [];
    if (d.tokens_in || d.tokens_out) facts.push(`${fmt.number(d.tokens_in)} tokens in, ${fmt.number(d.tokens_out)} out`);
    if (d.model) facts.push(`model ${d.model}`);
    if (d.trigger_type) facts.push(`triggered by ${d.trigger_type}`);
    facts.push(`at ${fmt.stamp(row.at)} (+${fmt.ms(row.start_ms)})`);
    const body = parts.flat().filter(Boolean);
    return h("div", { class: "wf-detail", "data-for": row.key },
      h("p", { class: "muted", text: facts.join(" · ") }),
      body.length ? body : h("p", { class: "muted", text: row.note || "nothing more was recorded for this row" }),
      row.inspect_id ? h("p", {}, h("a", { class: "inspect", href: links.inspect(row.inspect_id), text: "inspect the whole turn →" })) : null);
  }

  function line(row, depth, scale) {
    const kids = row.children || [];
    const toggle = kids.length
      ? h("button", { type: "button", class: "wf-toggle", "aria-label": collapsed.has(row.key) ? "show what it holds" : "hide what it holds",
        text: collapsed.has(row.key) ? "▸" : "▾", onclick: (e) => { e.stopPropagation(); flip(collapsed, row.key); } })
      : h("span", { class: "wf-toggle none" });
    const name = h("div", { class: "wf-name" }, toggle,
      h("span", { class: `wf-kind kind-${row.kind}`, text: row.badge || KIND_LABEL[row.kind] || row.kind }), " ",
      h("span", { class: "wf-label", text: row.label }),
      row.seat && row.kind !== "turn" ? [" ", h("a", { class: "seat-link", href: links.seat(row.seat), text: `@${row.seat}` })] : null,
      row.note ? [" ", h("span", { class: row.status === "skipped" ? "skip-reason" : "wf-note", text: row.status === "skipped" ? `skipped: ${row.note}` : `— ${row.note}` })] : null,
      row.event_id ? [" ", h("a", { class: "wf-link", href: links.event(row.event_id), title: "the event", text: "event →" })] : null);
    name.style.setProperty("--depth", String(depth));
    const el = h("div", { class: "wf-row", role: "treeitem", tabindex: "0", "data-key": row.key, "data-kind": row.kind,
      "data-status": row.status, "data-depth": depth, "aria-expanded": kids.length ? String(!collapsed.has(row.key)) : null,
      onclick: (e) => { if (!e.target.closest("a,button")) flip(open, row.key); },
      onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); flip(open, row.key); } } },
      name, timing(row, scale));
    const out = [el];
    if (open.has(row.key)) out.push(detail(row));
    if (!collapsed.has(row.key)) for (const child of kids) out.push(...line(child, depth + 1, scale));
    return out;
  }

  function flip(set, key) {
    if (set.has(key)) set.delete(key); else set.add(key);
    draw();
  }

  function axis(scale) {
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
      const tick = h("span", { class: "wf-tick", text: fmt.ms(scale.total * f) });
      tick.style.setProperty("--left", `${f * 100}%`);
      return tick;
    });
    return h("div", { class: "wf-row wf-axis", "aria-hidden": "true" }, h("div", { class: "wf-name muted", text: "span" }),
      h("div", { class: "wf-time" }, h("div", { class: "wf-track" }, ticks), h("span", { class: "wf-took muted", text: "took" })));
  }

  function headerFor(data) {
    const first = data.rows[0];
    const rootLine = first
      ? h("p", { class: "trace-root" }, h("span", { class: `wf-kind kind-${first.kind}`, text: KIND_LABEL[first.kind] || first.kind }), " ",
        first.event_id ? h("a", { href: links.event(first.event_id), text: first.label }) : h("span", { text: first.label }))
      : null;
    const running = walk(data.rows).filter((r) => r.status === "running").length;
    const facts = [`${data.events} events`, `${data.turns} turn${data.turns === 1 ? "" : "s"}`,
      `${fmt.ms(data.duration_ms)} from first to last`, `began ${fmt.stamp(data.started_at)}`];
    if (data.failed_turns) facts.push(`${data.failed_turns} turn${data.failed_turns === 1 ? "" : "s"} failed`);
    else if (data.failed) facts.push(`${data.failed} failed`);
    if (running) facts.push(`${running} running`);
    return [rootLine, h("p", { class: data.failed ? "trace-facts error" : "trace-facts muted", text: facts.join(" · ") })];
  }

  function draw() {
    const data = current;
    if (!data) return;
    if (!data.rows.length) {
      header.replaceChildren(h("p", { class: "muted", text: "This node's store holds no event of this trace (yet); it is drawn the moment one arrives." }));
      chart.replaceChildren();
      return;
    }
    const scale = scaleOf(data);
    header.replaceChildren(...headerFor(data).filter(Boolean));
    chart.replaceChildren(axis(scale), ...data.rows.flatMap((r) => line(r, 0, scale)));
    clearInterval(clock);
    if (walk(data.rows).some((r) => r.status === "running")) clock = setInterval(draw, 500);
  }

  async function load() {
    try {
      current = await Live.query("waterfall", { trace_id: traceId });
      Live.coverage(current);
      draw();
    } catch (err) {
      header.replaceChildren(h("p", { class: "error", text: `The trace could not be read: ${err.detail || err.message}` }));
    }
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(load, 300); // a burst of one trace's events is one read
  }

  Live.on("snapshot", load);
  Live.on("event", (frame) => {
    if (frame.event.trace_id !== traceId) return;
    if (frame.event.category || frame.event.type === "agent_turn_progress") soon();
  });
})();
