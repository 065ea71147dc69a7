// Library: corpora, their documents, uploads with one progress bar per file, deletes.
"use strict";

(() => {
  const { el, api, banner, bytes, on, may } = HN;
  // The suffixes of the formats' registry, as the page's file picker accepts them (accept=).
  const SUFFIXES = (document.getElementById("pick-files")?.accept || "").split(",").filter((s) => s.startsWith("."));
  const SUPPORTED = { test: (name) => SUFFIXES.some((s) => name.toLowerCase().endsWith(s)) };
  const AT_ONCE = 2;
  let selected = null; // {name, node}
  let corpora = [];

  // -- corpora ---------------------------------------------------------------------------
  async function loadCorpora() {
    let data;
    try {
      data = await api("/api/corpora");
    } catch (err) {
      banner(`Could not list the corpora: ${err.message}`, "bad");
      return;
    }
    corpora = data.corpora;
    const body = document.querySelector("#corpora tbody");
    body.replaceChildren(
      ...corpora.map((c) => {
        const open = el("button", {
          class: "link",
          text: c.name,
          attrs: { type: "button", "aria-label": `Show the documents of ${c.name} on ${c.node_name || c.node}` },
          on: { click: () => selectCorpus(c) },
        });
        const row = el(
          "tr",
          { attrs: { "data-corpus": c.name, "data-node": c.node } },
          el("td", {}, open),
          el("td", { class: "num", text: c.docs ?? "–" }),
          el("td", { class: "num hide-narrow", text: c.chunks ?? "–" }),
          el("td", { class: "num hide-narrow", text: bytes(c.size_bytes) }),
          el("td", { class: "hide-narrow", text: c.embedding_model || "–" }),
          el("td", { text: c.node_name || HN.shortId(c.node), attrs: { title: c.node } }),
          el(
            "td",
            {},
            el("span", { class: `badge ${c.online ? "online" : "offline"}`, text: c.online ? "online" : c.last_seen ? `offline · ${HN.ago(c.last_seen)}` : "offline" }),
            c.read_only ? el("span", { class: "badge", text: "archive · read-only", attrs: { title: c.label || c.name } }) : null,
            c.duplicate ? el("span", { class: "badge error", text: "name used twice", attrs: { title: "two nodes host a corpus of this name: queries go to the larger" } }) : null,
            c.replica_of
              ? el("span", {
                  class: `badge ${c.behind ? "error" : ""}`,
                  text: c.behind ? `replica · ${c.behind} behind` : "replica · up to date",
                  attrs: { title: `a copy of the corpus hosted on ${c.replica_of}` },
                })
              : c.replicas
                ? el("span", { class: "badge", text: `host · ${c.replicas} ${c.replicas === 1 ? "replica" : "replicas"}` })
                : null,
          ),
        );
        if (selected && selected.name === c.name && selected.node === c.node) row.classList.add("selected");
        return row;
      }),
    );
    document.getElementById("corpora-empty").hidden = corpora.length > 0;
    const names = document.getElementById("corpus-names");
    if (names) {
      const unique = [...new Set(corpora.filter((c) => !c.read_only).map((c) => c.name))]; // archives take no uploads
      names.replaceChildren(...unique.map((n) => el("option", { attrs: { value: n } })));
    }
    if (selected) {
      const still = corpora.find((c) => c.name === selected.name && c.node === selected.node);
      if (still) await loadDocuments(still);
      else document.getElementById("documents-card").hidden = true;
    }
  }

  async function selectCorpus(c) {
    selected = { name: c.name, node: c.node };
    for (const row of document.querySelectorAll("#corpora tbody tr")) {
      row.classList.toggle("selected", row.dataset.corpus === c.name && row.dataset.node === c.node);
    }
    await loadDocuments(c);
  }

  async function loadDocuments(c) {
    const card = document.getElementById("documents-card");
    document.getElementById("docs-corpus").textContent = c.name;
    card.hidden = false;
    const body = document.querySelector("#documents tbody");
    let data;
    try {
      data = await api(`/api/documents?corpus=${encodeURIComponent(c.name)}&node=${encodeURIComponent(c.node)}`);
    } catch (err) {
      body.replaceChildren(el("tr", {}, el("td", { attrs: { colspan: 6 }, class: "muted", text: `Not available: ${err.message}` })));
      document.getElementById("documents-empty").hidden = true;
      return;
    }
    const docs = data.documents || [];
    body.replaceChildren(
      ...docs.map((d) => {
        const actions = el("div", { class: "actions" });
        const page = el("a", { text: "Open", attrs: { href: `/files/${encodeURIComponent(d.doc_cid)}?node=${encodeURIComponent(c.node)}`, target: "_blank", rel: "noopener" } });
        actions.append(page);
        if (may("trusted")) {
          actions.append(
            el("button", {
              class: "secondary small",
              text: "Delete",
              attrs: { type: "button", "aria-label": `Delete ${d.title || d.filename || d.doc_cid}` },
              on: { click: () => deleteDocument(c, d) },
            }),
          );
        }
        return el(
          "tr",
          { attrs: { "data-doc": d.doc_cid } },
          el("td", { text: d.title || "(untitled)" }),
          el("td", { text: d.filename || "–", attrs: d.source_path ? { title: d.source_path } : {} }),
          el("td", { class: "num hide-narrow", text: d.pages ?? "–" }),
          el("td", { class: "num", text: d.chunks ?? "–" }),
          el("td", { class: "hide-narrow", text: d.ingested_at ? new Date(d.ingested_at * (d.ingested_at > 1e12 ? 1 : 1000)).toLocaleDateString() : "–" }),
          el("td", {}, actions),
        );
      }),
    );
    document.getElementById("documents-empty").hidden = docs.length > 0;
  }

  async function deleteDocument(c, d) {
    const name = d.title || d.filename || d.doc_cid;
    const ok = await HN.confirm("Delete this document?", `"${name}" will be removed from ${c.name} for everyone.`, "Delete");
    if (!ok) return;
    try {
      await api("/api/documents/delete", { method: "POST", json: { corpus: c.name, doc_cid: d.doc_cid, node: c.node } });
      banner(`Deleted "${name}".`, "ok", 5);
    } catch (err) {
      banner(`Could not delete "${name}": ${err.message}`, "bad");
    }
    await loadCorpora();
  }

  // -- uploads ------------------------------------------------------------------------------
  const items = new Map(); // job id or local key -> {li, progress, state}
  const queue = [];
  let running = 0;

  function item(name) {
    const progress = el("progress", { attrs: { max: 1, value: 0, "aria-label": `Progress of ${name}` } });
    const state = el("div", { class: "state", text: "Waiting…" });
    const li = el("li", { class: "upload" }, el("div", { class: "head" }, el("span", { class: "name", text: name })), progress, state);
    document.getElementById("uploads").prepend(li);
    return { li, progress, state };
  }

  const STAGES = { import: "Storing", push: "Sending to the host", fetch: "Host is fetching", read: "Reading", ocr: "Reading scanned pages (OCR)", chunk: "Splitting", embed: "Embedding", write: "Writing the index", wait: "Waiting for the node" };

  function showJob(view, job) {
    view.li.dataset.job = job.id;
    view.li.classList.toggle("done", job.state === "done");
    view.li.classList.toggle("error", job.state === "error");
    if (job.state === "done") {
      view.progress.max = 1;
      view.progress.value = 1;
      const r = job.result || {};
      view.state.textContent = r.existing ? `Done: already in ${job.corpus}` : `Done: ${r.chunks ?? "?"} chunks indexed in ${job.corpus}`;
    } else if (job.state === "error") {
      view.progress.removeAttribute("value");
      view.progress.hidden = true;
      view.state.textContent = `Failed: ${job.message || job.error}`;
    } else if (job.total > 0) {
      view.progress.max = job.total;
      view.progress.value = Math.min(job.current, job.total);
      view.state.textContent = `${STAGES[job.stage] || job.stage} ${job.current}/${job.total}`;
    } else {
      view.progress.removeAttribute("value");
      view.state.textContent = `${STAGES[job.stage] || "Queued"}…`;
    }
  }

  // A job may move on (or end) before its upload's answer names it: its news waits here until then.
  const unclaimed = new Map();

  on("job", (job) => {
    const view = items.get(job.id);
    if (view) showJob(view, job);
    else unclaimed.set(job.id, job);
    if (job.state === "done") scheduleRefresh();
  });
  on("event", (ev) => {
    if (ev.type === "rag.document.ingested" || ev.type === "rag.document.deleted") scheduleRefresh();
  });
  on("reconnected", () => {
    loadCorpora();
    loadJobs();
  });

  let refreshTimer = null;
  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(loadCorpora, 300);
  }

  function enqueue(files) {
    const corpusInput = document.getElementById("upload-corpus");
    const corpus = corpusInput.value.trim();
    if (!/^[a-z0-9-]{1,64}$/.test(corpus)) {
      banner("Choose a corpus name first: lowercase letters, digits and '-'.", "bad");
      corpusInput.focus();
      return;
    }
    for (const file of files) {
      const view = item(file.relativePath || file.name);
      queue.push({ file, corpus, view });
    }
    pump();
  }

  function pump() {
    while (running < AT_ONCE && queue.length) {
      const next = queue.shift();
      running += 1;
      upload(next).finally(() => {
        running -= 1;
        pump();
      });
    }
  }

  function upload({ file, corpus, view }) {
    return new Promise((resolve) => {
      const xhr = new XMLHttpRequest();
      const url = `/api/upload?corpus=${encodeURIComponent(corpus)}&name=${encodeURIComponent(file.name)}`;
      xhr.open("POST", url);
      xhr.setRequestHeader("X-CSRF-Token", document.querySelector('meta[name="hn-csrf"]').content);
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.upload.addEventListener("progress", (e) => {
        if (!e.lengthComputable) return;
        view.progress.max = e.total;
        view.progress.value = e.loaded;
        view.state.textContent = `Uploading ${bytes(e.loaded)} of ${bytes(e.total)}`;
      });
      xhr.addEventListener("load", () => {
        let data = {};
        try {
          data = JSON.parse(xhr.responseText);
        } catch (err) {
          data = {};
        }
        if (xhr.status === 202 && data.job) {
          items.set(data.job.id, view);
          showJob(view, unclaimed.get(data.job.id) || data.job);  // live news is newer than the answer
          unclaimed.delete(data.job.id);
        } else {
          showJob(view, { state: "error", error: data.error || xhr.status, message: data.message || xhr.statusText });
        }
        resolve();
      });
      xhr.addEventListener("error", () => {
        showJob(view, { state: "error", error: "partition", message: "the node is not answering" });
        resolve();
      });
      xhr.send(file);
    });
  }

  async function loadJobs() {
    let data;
    try {
      data = await api("/api/jobs");
    } catch (err) {
      return;
    }
    for (const job of data.jobs) {
      let view = items.get(job.id);
      if (!view) {
        view = item(job.name);
        items.set(job.id, view);
      }
      showJob(view, job);
    }
  }

  // Files of a dropped folder, recursively; only supported types, no hidden files.
  async function filesOf(entry, prefix) {
    if (entry.isFile) {
      if (entry.name.startsWith(".") || !SUPPORTED.test(entry.name)) return [];
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      file.relativePath = prefix + entry.name;
      return [file];
    }
    if (!entry.isDirectory || entry.name.startsWith(".")) return [];
    const reader = entry.createReader();
    const entries = [];
    for (;;) {
      const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
      if (!batch.length) break;
      entries.push(...batch);
    }
    entries.sort((a, b) => a.name.localeCompare(b.name));
    const out = [];
    for (const e of entries) out.push(...(await filesOf(e, `${prefix}${entry.name}/`)));
    return out;
  }

  function setUpUploads() {
    const zone = document.getElementById("dropzone");
    if (!zone) return;
    zone.addEventListener("dragover", (e) => {
      e.preventDefault();
      zone.classList.add("over");
    });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", async (e) => {
      e.preventDefault();
      zone.classList.remove("over");
      const entries = [...e.dataTransfer.items].map((i) => (i.webkitGetAsEntry ? i.webkitGetAsEntry() : null));
      if (entries.every(Boolean)) {
        const files = [];
        for (const entry of entries) files.push(...(await filesOf(entry, "")));
        enqueue(files);
      } else {
        enqueue([...e.dataTransfer.files]);
      }
    });
    document.getElementById("choose-files").addEventListener("click", () => document.getElementById("pick-files").click());
    document.getElementById("choose-folder").addEventListener("click", () => document.getElementById("pick-folder").click());
    document.getElementById("pick-files").addEventListener("change", (e) => {
      enqueue([...e.target.files]);
      e.target.value = "";
    });
    document.getElementById("pick-folder").addEventListener("change", (e) => {
      const files = [...e.target.files].filter((f) => SUPPORTED.test(f.name) && !f.webkitRelativePath.split("/").some((p) => p.startsWith(".")));
      for (const f of files) f.relativePath = f.webkitRelativePath;
      enqueue(files);
      e.target.value = "";
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("refresh").addEventListener("click", loadCorpora);
    setUpUploads();
    loadCorpora();
    loadJobs();
  });
})();
