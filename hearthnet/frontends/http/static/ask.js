// Ask: a chat answered by the node's composer (answer.ask), streamed, with numbered citation
// chips that show the passage and open the source at the cited page.
"use strict";

(() => {
  const { el, api, banner, on, shortId } = HN;
  let current = null; // the open chat's id
  let busy = false;
  let nodeNames = {};

  // -- corpora to search ----------------------------------------------------------------
  async function loadCorpora() {
    let data;
    try {
      data = await api("/api/corpora");
    } catch (err) {
      return;
    }
    const names = [...new Set(data.corpora.map((c) => c.name))].sort();
    for (const c of data.corpora) if (c.node_name) nodeNames[c.node] = c.node_name;
    const box = document.getElementById("corpora-options");
    const checked = new Set(selectedCorpora() || []);
    box.replaceChildren(
      ...names.map((n) =>
        el("label", { class: "toggle" }, el("input", { attrs: { type: "checkbox", value: n, checked: checked.has(n) }, on: { change: summarize } }), n),
      ),
    );
    if (!names.length) box.replaceChildren(el("span", { class: "muted", text: "No corpus yet: add documents in the Library." }));
    summarize();
  }

  function selectedCorpora() {
    const picked = [...document.querySelectorAll("#corpora-options input:checked")].map((i) => i.value);
    return picked.length ? picked : null;
  }

  function summarize() {
    const picked = selectedCorpora();
    document.getElementById("corpora-summary").textContent = picked ? picked.join(", ") : "all corpora";
  }

  // -- chats ------------------------------------------------------------------------------
  async function loadChats() {
    let data;
    try {
      data = await api("/api/chats");
    } catch (err) {
      document.getElementById("sessions-empty").textContent = `Chats are not available: ${err.message}`;
      return;
    }
    const list = document.getElementById("session-list");
    const chats = data.sessions || [];
    list.replaceChildren(
      ...chats.map((c) => {
        const title = c.title || "Untitled chat";
        const li = el(
          "li",
          { class: c.id === current ? "current" : "", attrs: { "data-session": c.id } },
          el("button", { class: "open", text: title, attrs: { type: "button", title, "aria-current": c.id === current ? "true" : null }, on: { click: () => openChat(c.id) } }),
          el(
            "span",
            { class: "tools" },
            el("button", { class: "secondary", text: "Rename", attrs: { type: "button", "aria-label": `Rename ${title}` }, on: { click: () => renameChat(c, title) } }),
            el("button", { class: "secondary", text: "Delete", attrs: { type: "button", "aria-label": `Delete ${title}` }, on: { click: () => deleteChat(c, title) } }),
          ),
        );
        return li;
      }),
    );
    document.getElementById("sessions-empty").hidden = chats.length > 0;
  }

  async function openChat(id) {
    let data;
    try {
      data = await api(`/api/chat?session=${encodeURIComponent(id)}`);
    } catch (err) {
      banner(`Could not open the chat: ${err.message}`, "bad");
      return;
    }
    current = id;
    const messages = document.getElementById("messages");
    messages.replaceChildren();
    for (const turn of data.turns || []) {
      const view = addTurn(turn.question || "");
      // the server's record of what the turn cited is the only source of its chips
      const citations = (turn.cited || []).map((id) => ({ chunk_id: id }));
      finish(view, { answer: turn.answer || "", mode: turn.mode, citations, sources: turn.sources || [] });
    }
    document.getElementById("chat-empty").hidden = messages.children.length > 0;
    await loadChats();
    document.getElementById("question").focus();
  }

  async function renameChat(c, title) {
    const input = el("input", { attrs: { value: title, maxlength: 200, "aria-label": "New name" } });
    const ok = await HN.confirm("Rename this chat", "Its new name:", "Rename", input);
    if (!ok || !input.value.trim()) return;
    try {
      await api("/api/chats/rename", { method: "POST", json: { session: c.id, title: input.value.trim() } });
    } catch (err) {
      banner(`Could not rename: ${err.message}`, "bad");
    }
    await loadChats();
  }

  async function deleteChat(c, title) {
    const ok = await HN.confirm("Delete this chat?", `"${title}" and its answers are deleted.`, "Delete");
    if (!ok) return;
    try {
      await api("/api/chats/delete", { method: "POST", json: { session: c.id } });
    } catch (err) {
      banner(`Could not delete: ${err.message}`, "bad");
    }
    if (current === c.id) newChat();
    await loadChats();
  }

  function newChat() {
    current = null;
    document.getElementById("messages").replaceChildren();
    document.getElementById("chat-empty").hidden = false;
    for (const li of document.querySelectorAll("#session-list li")) li.classList.remove("current");
    document.getElementById("question").focus();
  }

  // -- one question and its answer ------------------------------------------------------------
  function addTurn(question) {
    const status = el("div", { class: "status", attrs: { role: "status" } });
    const mode = el("div", { class: "mode" });
    const text = el("div", { class: "text" });
    const cites = el("div", { class: "citations" });
    const debug = el("div", { class: "debug" });
    const answer = el("div", { class: "answer" }, mode, text, status, cites, debug);
    const li = el("li", {}, el("div", { class: "question", text: question }), answer);
    document.getElementById("messages").append(li);
    document.getElementById("chat-empty").hidden = true;
    return { li, status, mode, text, cites, debug, raw: "" };
  }

  /** Citation markers in the answer text: [file#chunk_id; file#chunk_id] -> chips, but only for
   * chunks of the server's citation list: text that merely looks like a marker stays text. */
  const MARK = /\[([^\[\]]+#[^\[\]]+)\]/g;

  function finish(view, out) {
    const sources = out.sources || [];
    const byChunk = {};
    for (const s of sources) byChunk[s.chunk_id] = s;
    const cited = new Set((out.citations || []).map((c) => c.chunk_id));
    const order = [];
    const number = (chunk) => {
      let i = order.indexOf(chunk);
      if (i < 0) {
        order.push(chunk);
        i = order.length - 1;
      }
      return i + 1;
    };
    const parts = [];
    let last = 0;
    const answer = String(out.answer || "");
    for (const m of answer.matchAll(MARK)) {
      const refs = m[1].split(/[;,]/).map((p) => p.trim());
      if (!refs.every((r) => r.includes("#") && cited.has(r.slice(r.lastIndexOf("#") + 1)))) continue;
      parts.push(answer.slice(last, m.index));
      for (const ref of refs) {
        const chunk = ref.slice(ref.lastIndexOf("#") + 1);
        // a turn reopened from its chat keeps no sources: the marker's file name stands in
        if (!byChunk[chunk]) byChunk[chunk] = { chunk_id: chunk, file: ref.slice(0, ref.lastIndexOf("#")) };
        parts.push({ chunk, n: number(chunk) });
      }
      last = m.index + m[0].length;
    }
    parts.push(answer.slice(last));
    const cards = {};
    view.text.replaceChildren(
      ...parts.map((p) => {
        if (typeof p === "string") return document.createTextNode(p);
        const id = `cite-${Math.random().toString(36).slice(2)}-${p.n}`;
        const chip = el("button", {
          class: "chip",
          text: String(p.n),
          attrs: { type: "button", "aria-expanded": "false", "aria-controls": id, "aria-label": `Source ${p.n}`, "data-chunk": p.chunk },
        });
        chip.addEventListener("click", () => toggle(view, chip, p, byChunk[p.chunk], id, cards));
        return chip;
      }),
    );
    if (out.mode === "extractive") {
      view.mode.replaceChildren(el("span", { class: "badge", text: "Extractive answer: quoted from the documents, no language model" }));
    } else if (out.mode === "abstained") {
      view.mode.replaceChildren(el("span", { class: "badge", text: "Not in the documents" }));
    } else view.mode.replaceChildren();
    const nearest = sources.filter((s) => s.nearest);
    if (nearest.length) {
      view.cites.replaceChildren(
        el("h3", { class: "nearest", text: "Nearest passages (not an answer)" }),
        ...nearest.map((s, i) => citationCard(i + 1, s, `near-${Math.random().toString(36).slice(2)}-${i}`)),
      );
    }
    view.status.textContent = "";
    if (out.meta && out.meta.debug) view.debug.replaceChildren(debugView(out.meta));
  }

  function toggle(view, chip, p, source, id, cards) {
    const open = chip.getAttribute("aria-expanded") === "true";
    for (const other of view.text.querySelectorAll(".chip")) other.setAttribute("aria-expanded", "false");
    view.cites.replaceChildren();
    if (open) return;
    chip.setAttribute("aria-expanded", "true");
    view.cites.append(cards[id] || (cards[id] = citationCard(p.n, source, id)));
  }

  function citationCard(n, s, id) {
    const page = s.page ?? null;
    const rows = [
      ["Title", s.title || "–"],
      ["File", s.file || "–"],
      ["Page", page ?? "–"],
      ...(s.place && s.place !== `page ${page}` ? [["Where", s.place]] : []),
      ["Corpus", s.corpus || "–"],
      ["Node", nodeNames[s.node] || shortId(s.node) || "–"],
    ];
    if (debugOn()) rows.push(["Chunk", s.chunk_id], ["Score", s.score === undefined ? "–" : Number(s.score).toFixed(3)]);
    const card = el(
      "div",
      { class: "citation", attrs: { id, role: "region", "aria-label": `Source ${n}` } },
      s.text ? el("blockquote", { class: "passage", text: s.text }) : el("p", { class: "muted", text: "The passage is shown with the answer it came with." }),
      el("dl", {}, ...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
    );
    if (s.doc_cid) card.append(openLink(s, page));
    return card;
  }

  // A document the browser shows (a PDF, a photo, text) opens as itself, a PDF at #page=N; any
  // other (Word, slides, sheets, e-books, web pages, e-mail) as its HTML rendering at the anchor
  // of the cited section and paragraph, slide, or sheet and row (/files/<cid>/view).
  function openLink(s, page) {
    const cid = encodeURIComponent(s.doc_cid);
    const anchor = s.anchor || (page ? `page=${page}` : "");
    if (anchor.startsWith("u") && s.corpus) {
      const href = `/files/${cid}/view?corpus=${encodeURIComponent(s.corpus)}#${anchor}`;
      return el("a", { class: "open-source", text: `Open the document at ${s.place || "its place"}`, attrs: { href, target: "_blank", rel: "noopener" } });
    }
    const pdf = /\.pdf$/i.test(s.file || "");
    const href = `/files/${cid}${s.node ? `?node=${encodeURIComponent(s.node)}` : ""}${anchor ? `#${anchor}` : ""}`;
    const text = page && pdf ? `Open the PDF at page ${page}` : "Open the document";
    return el("a", { class: "open-source", text, attrs: { href, target: "_blank", rel: "noopener" } });
  }

  function debugOn() {
    return document.getElementById("debug").checked;
  }

  function debugView(meta) {
    const d = meta.debug || {};
    const rows = (d.chunks || []).map((c) =>
      el("tr", {}, el("td", { class: "id", text: c.chunk_id }), el("td", { text: c.corpus }), el("td", { class: "num", text: Number(c.score).toFixed(3) }), el("td", { class: "num", text: c.fused === undefined ? "–" : Number(c.fused).toFixed(4) })),
    );
    const timings = ["retrieve_ms", "ttft_ms", "total_ms"].filter((k) => d[k] !== undefined && d[k] !== null).map((k) => `${k.replace("_ms", "")} ${d[k]} ms`);
    return el(
      "details",
      { attrs: { open: true } },
      el("summary", { text: `Debug: ${timings.join(" · ") || "no timings"} · retrieval ${meta.rag || "?"}` }),
      el("div", { class: "table-wrap" }, el("table", { class: "table" }, el("thead", {}, el("tr", {}, ...["Chunk", "Corpus", "Score", "Fused"].map((h) => el("th", { text: h, attrs: { scope: "col" } })))), el("tbody", {}, ...rows))),
    );
  }

  async function ask(question) {
    const view = addTurn(question);
    view.status.textContent = "Searching…";
    const body = { question, debug: document.getElementById("debug").checked };
    const corpora = selectedCorpora();
    if (corpora) body.corpora = corpora;
    if (current) body.session = current;
    try {
      for await (const { event, data } of HN.postEvents("/api/ask", body)) {
        if (event === "chat") {
          current = data.session;
        } else if (event === "frame") {
          if (data.stage === "retrieve") {
            const n = (data.corpora || []).length;
            view.status.textContent = n ? `Searching ${n} ${n === 1 ? "corpus" : "corpora"}…` : "Searching…";
          } else if (typeof data.delta === "string") {
            view.raw += data.delta;
            view.text.textContent = view.raw;
            view.status.textContent = "Writing…";
          }
        } else if (event === "done") {
          finish(view, data);
        } else if (event === "error") {
          view.status.replaceChildren(el("span", { class: "error", text: `No answer: ${data.message || data.error}` }));
        }
      }
    } catch (err) {
      view.status.replaceChildren(el("span", { class: "error", text: `No answer: ${err.message}` }));
    }
    await loadChats();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("ask-form");
    const input = document.getElementById("question");
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const question = input.value.trim();
      if (!question || busy) return;
      busy = true;
      document.getElementById("ask-button").disabled = true;
      input.value = "";
      try {
        await ask(question);
      } finally {
        busy = false;
        document.getElementById("ask-button").disabled = false;
        input.focus();
      }
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey) {
        e.preventDefault();
        form.requestSubmit();
      }
    });
    document.getElementById("new-chat").addEventListener("click", newChat);
    on("reconnected", () => {
      loadCorpora();
      loadChats();
    });
    on("event", (ev) => {
      if (ev.type === "rag.document.ingested" || ev.type === "rag.document.deleted") loadCorpora();
    });
    loadCorpora();
    loadChats();
  });
})();
