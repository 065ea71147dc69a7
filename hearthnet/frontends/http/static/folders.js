// Library: the folders this node keeps indexed (its owner's view): indexed, pending, failed with
// each reason, last change.  Every string from the node is set as text, never as HTML.
"use strict";

(() => {
  const { el, api, banner } = HN;
  const REFRESH_MS = 5000;

  function state(f) {
    const text = f.scan ? `${f.state} ${f.scan.current}/${f.scan.total}` : f.state;
    const bad = f.state === "refused" || f.state === "missing";
    return el("span", { class: `badge ${bad ? "error" : f.state === "watching" ? "online" : ""}`, text, attrs: { title: f.reason || "" } });
  }

  async function loadFolders() {
    let data;
    try {
      data = await api("/api/folders");
    } catch (err) {
      banner(`Could not list the watched folders: ${err.message}`, "bad");
      return;
    }
    const folders = data.folders || [];
    document.querySelector("#folders tbody").replaceChildren(
      ...folders.map((f) =>
        el(
          "tr",
          { attrs: { "data-folder": f.path } },
          el("td", { text: f.path }),
          el("td", { text: f.corpus }),
          el("td", { class: "num", text: f.indexed }),
          el("td", { class: "num", text: f.pending }),
          el("td", { class: "num", text: f.failed_count }),
          el("td", { class: "hide-narrow", text: f.last_change ? new Date(f.last_change * 1000).toLocaleString() : "–" }),
          el("td", {}, state(f)),
        ),
      ),
    );
    document.getElementById("folder-failures").replaceChildren(
      ...folders.flatMap((f) => (f.failed || []).map((bad) => el("li", { text: `${bad.path}: ${bad.reason}` }))),
    );
    document.getElementById("folders-empty").hidden = folders.length > 0;
  }

  document.addEventListener("DOMContentLoaded", () => {
    loadFolders();
    setInterval(loadFolders, REFRESH_MS);
  });
})();
