"use strict";
/* Company page: the revisions are served with the page; a revision activated or applied while
 * it is open is announced here, with a link to read the page again. */
(function () {
  Live.on("event", (frame) => {
    const e = frame.event;
    if (e.type !== "config_revision_activated" && e.type !== "config_revision_applied") return;
    Live.note("revision", `${e.summary}. Reload to see the revisions as they are now.`, "info");
  });
})();
