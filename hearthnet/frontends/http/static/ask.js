// Ask: a chat answered by the node's composer (answer.ask), streamed, with numbered citation
// chips that show the passage and open the source at the cited page.
"use strict";

(() => {
  const { el, api, banner, on, shortId } = HN;
  let current = null; // the open chat's id
  let busy = false;
  let nodeNames = {};
  let turns = []; // the open chat's turns as shown: {question, out} (what the export writes)
  let chatTitle = "";
  const MODELS_KEY = "hn-chat-models"; // the model picked for each chat, in this browser

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

  // -- who answers: a model of the mesh, or extractive only, per chat -------------------------
  async function loadModels() {
    let data;
    try {
      const me = await api("/api/node"); // this node's name, for sources it holds (attachments)
      if (me.node_id && me.name) nodeNames[me.node_id] = me.name;
      data = await api("/api/models");
    } catch (err) {
      return;
    }
    const select = document.getElementById("model");
    const keep = select.value;
    const models = (data.models || []).map((m) => el("option", { text: `Model: ${m.id}`, attrs: { value: `model:${m.id}` } }));
    select.replaceChildren(
      el("option", { text: "Model: the node's choice", attrs: { value: "" } }),
      ...models,
      el("option", { text: "Extractive only (no model)", attrs: { value: "extractive" } }),
    );
    select.value = [...select.options].some((o) => o.value === keep) ? keep : "";
    restoreModel();
    select.dataset.loaded = "true";
  }

  function savedModels() {
    try {
      return JSON.parse(localStorage.getItem(MODELS_KEY) || "{}") || {};
    } catch (err) {
      return {};
    }
  }

  function saveModel() {
    if (!current) return;
    const all = savedModels();
    const value = document.getElementById("model").value;
    if (value) all[current] = value;
    else delete all[current];
    try {
      localStorage.setItem(MODELS_KEY, JSON.stringify(all));
    } catch (err) {
      /* storage full or off: the choice lasts for this page only */
    }
  }

  function restoreModel() {
    const select = document.getElementById("model");
    const wanted = (current && savedModels()[current]) || "";
    if (![...select.options].some((o) => o.value === wanted)) {
      if (wanted.startsWith("model:")) select.append(el("option", { text: `Model: ${wanted.slice(6)} (not reachable now)`, attrs: { value: wanted } }));
      else return;
    }
    select.value = wanted;
  }

  // -- documents attached to the open chat -------------------------------------------------------
  function showAttachments(list) {
    const box = document.getElementById("attachments");
    box.replaceChildren(
      ...(list || []).map((a) =>
        el("li", { class: "attachment", attrs: { "data-attachment": a.id } }, el("span", { class: "muted", text: "Attached: " }), el("span", { class: "name", text: a.name }), el("span", { class: "muted", text: ` · ${a.pages} ${a.pages === 1 ? "page" : "pages"}, ${a.chunks} ${a.chunks === 1 ? "passage" : "passages"} · this chat only` })),
      ),
    );
  }

  async function attachFiles(files) {
    for (const file of files) {
      const box = document.getElementById("attachments");
      const pending = el("li", { class: "attachment pending", attrs: { role: "status" } }, el("span", { class: "name", text: file.name }), el("span", { class: "muted", text: " · reading…" }));
      box.append(pending);
      const query = `name=${encodeURIComponent(file.name)}${current ? `&session=${encodeURIComponent(current)}` : ""}`;
      try {
        const data = await api(`/api/chats/attach?${query}`, { method: "POST", body: file, type: file.type || "application/octet-stream" });
        current = data.session;
        saveModel();
        const chat = await api(`/api/chat?session=${encodeURIComponent(current)}`);
        chatTitle = chat.title || chatTitle;
        showAttachments(chat.attachments);
        document.getElementById("export-chat").hidden = false;
      } catch (err) {
        pending.remove();
        banner(`Could not attach ${file.name}: ${err.message}`, "bad");
      }
    }
    await loadChats();
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
    const open = chats.find((c) => c.id === current);
    if (open && open.title) chatTitle = open.title; // named by its first question once asked
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
    chatTitle = data.title || "";
    turns = [];
    restoreModel();
    showAttachments(data.attachments);
    const messages = document.getElementById("messages");
    messages.replaceChildren();
    for (const turn of data.turns || []) {
      const view = addTurn(turn.question || "");
      // the server's record of what the turn cited is the only source of its chips
      const citations = (turn.cited || []).map((id) => ({ chunk_id: id }));
      const out = { answer: turn.answer || "", mode: turn.mode, citations, sources: turn.sources || [] };
      finish(view, out);
      turns.push({ question: turn.question || "", out });
    }
    document.getElementById("chat-empty").hidden = messages.children.length > 0;
    document.getElementById("export-chat").hidden = turns.length === 0;
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
    turns = [];
    chatTitle = "";
    document.getElementById("model").value = "";
    showAttachments([]);
    document.getElementById("export-chat").hidden = true;
    document.getElementById("messages").replaceChildren();
    document.getElementById("chat-empty").hidden = false;
    for (const li of document.querySelectorAll("#session-list li")) li.classList.remove("current");
    document.getElementById("question").focus();
  }

  // -- one question and its answer ------------------------------------------------------------
  function addTurn(question) {
    const status = el("div", { class: "status", attrs: { role: "status" } });
    const notice = el("div", { class: "left-out", attrs: { hidden: true } });
    const mode = el("div", { class: "mode" });
    const text = el("div", { class: "text" });
    const cites = el("div", { class: "citations" });
    const debug = el("div", { class: "debug" });
    const answer = el("div", { class: "answer" }, notice, mode, text, status, cites, debug);
    const li = el("li", {}, el("div", { class: "question", text: question }), answer);
    document.getElementById("messages").append(li);
    document.getElementById("chat-empty").hidden = true;
    return { li, status, notice, mode, text, cites, debug, raw: "" };
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
    showLeftOut(view, out.left_out || []);
    if (out.meta && out.meta.debug) view.debug.replaceChildren(debugView(out.meta));
  }

  /** Corpora the answer could not search, and why (the CLI's "left out" note): above the answer,
   * so nobody reads "the documents do not say" without knowing which documents were not asked. */
  function showLeftOut(view, reasons) {
    view.notice.hidden = !reasons.length;
    view.notice.replaceChildren();
    if (!reasons.length) return;
    view.notice.setAttribute("role", "note");
    view.notice.append(
      el("strong", { text: "Left out of this answer: " }),
      ...reasons.map((r, i) => el("span", { class: "reason", text: i ? `; ${r}` : r })),
    );
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
  // other (Word, slides, sheets, e-books, web pages, e-mail, TIFF/HEIC scans) as its HTML rendering at the anchor
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

  // -- export: the open chat as Markdown, each answer with its numbered sources ------------------
  function markdownOf() {
    const lines = [`# ${oneLine(chatTitle || (turns[0] && turns[0].question) || "Chat")}`, "", `Exported from HearthNet on ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC.`];
    const attached = [...document.querySelectorAll("#attachments li.attachment:not(.pending) .name")].map((e) => e.textContent);
    if (attached.length) lines.push("", `Documents attached to this chat: ${attached.join(", ")}.`);
    turns.forEach((t, i) => {
      lines.push("", `## ${i + 1}. ${oneLine(t.question)}`, "");
      const { text, cited } = numbered(t.out);
      if (t.out.mode === "extractive") lines.push("*Extractive answer: quoted from the documents, no language model.*", "");
      if (t.out.mode === "abstained") lines.push("*Not in the documents.*", "");
      if ((t.out.left_out || []).length) lines.push(`*Left out: ${t.out.left_out.join("; ")}.*`, "");
      lines.push(text.trim());
      const nearest = (t.out.sources || []).filter((s) => s.nearest);
      if (cited.length) {
        lines.push("", "Sources:", "");
        cited.forEach((s, n) => lines.push(`${n + 1}. ${sourceLine(s)}`));
      } else if (nearest.length) {
        lines.push("", "Nearest passages (not an answer):", "");
        nearest.forEach((s, n) => lines.push(`${n + 1}. ${sourceLine(s)}`));
      }
    });
    return lines.join("\n") + "\n";
  }

  function oneLine(text) {
    return String(text).replace(/\s+/g, " ").trim();
  }

  /** The answer with its checked markers as [1], [2] (the order of first citation) and the
   * sources those numbers name; a marker the server did not keep stays as it is. */
  function numbered(out) {
    const cited = new Set((out.citations || []).map((c) => c.chunk_id));
    const byChunk = {};
    for (const s of out.sources || []) byChunk[s.chunk_id] = s;
    const order = [];
    const text = String(out.answer || "").replace(MARK, (whole, inner) => {
      const refs = inner.split(/[;,]/).map((p) => p.trim());
      if (!refs.every((r) => r.includes("#") && cited.has(r.slice(r.lastIndexOf("#") + 1)))) return whole;
      return refs
        .map((r) => {
          const chunk = r.slice(r.lastIndexOf("#") + 1);
          if (!order.includes(chunk)) order.push(chunk);
          if (!byChunk[chunk]) byChunk[chunk] = { chunk_id: chunk, file: r.slice(0, r.lastIndexOf("#")) };
          return `[${order.indexOf(chunk) + 1}]`;
        })
        .join("");
    });
    return { text, cited: order.map((c) => byChunk[c]) };
  }

  function sourceLine(s) {
    const parts = [];
    const title = s.title && s.title !== s.file ? `${oneLine(s.title)} — ` : "";
    parts.push(`${title}${oneLine(s.file || s.chunk_id)}`);
    if (s.page) parts[0] += `, page ${s.page}`;
    if (s.corpus) parts.push(`${s.corpus}${s.node ? ` on ${nodeNames[s.node] || shortId(s.node)}` : ""}`);
    let line = parts.join(" — ");
    if (s.text) line += `\n   > ${oneLine(s.text).slice(0, 400)}`;
    return line;
  }

  function exportChat() {
    const blob = new Blob([markdownOf()], { type: "text/markdown;charset=utf-8" });
    const name = `${oneLine(chatTitle || "chat").replace(/[^\w.-]+/g, "-").slice(0, 60) || "chat"}.md`;
    const link = el("a", { attrs: { href: URL.createObjectURL(blob), download: name } });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  async function ask(question) {
    const view = addTurn(question);
    let listed = false;
    view.status.textContent = "Searching…";
    const body = { question, debug: document.getElementById("debug").checked };
    const who = document.getElementById("model").value;
    if (who === "extractive") body.extractive = true;
    else if (who.startsWith("model:")) body.model = who.slice(6);
    const corpora = selectedCorpora();
    if (corpora) body.corpora = corpora;
    if (current) body.session = current;
    try {
      for await (const { event, data } of HN.postEvents("/api/ask", body)) {
        if (event === "chat") {
          current = data.session;
          saveModel();
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
          if (!turns.length) chatTitle = question; // a chat is named by its first question
          await loadChats(); // the chat is listed by the time its answer is complete
          listed = true;
          finish(view, data);
          turns.push({ question, out: data });
          document.getElementById("export-chat").hidden = false;
        } else if (event === "error") {
          view.status.replaceChildren(el("span", { class: "error", text: `No answer: ${data.message || data.error}` }));
        }
      }
    } catch (err) {
      view.status.replaceChildren(el("span", { class: "error", text: `No answer: ${err.message}` }));
    }
    if (!listed) await loadChats();
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
    const picker = document.getElementById("pick-attachment");
    document.getElementById("attach").addEventListener("click", () => picker.click());
    picker.addEventListener("change", async () => {
      const files = [...picker.files];
      picker.value = "";
      await attachFiles(files);
    });
    document.getElementById("model").addEventListener("change", saveModel);
    document.getElementById("export-chat").addEventListener("click", exportChat);
    on("reconnected", () => {
      loadCorpora();
      loadModels();
      loadChats();
    });
    on("event", (ev) => {
      if (ev.type === "rag.document.ingested" || ev.type === "rag.document.deleted") loadCorpora();
    });
    loadCorpora();
    loadModels();
    loadChats();
  });
})();
