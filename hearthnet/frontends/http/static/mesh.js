// Mesh: who is in the community, what each node offers and how it is doing, recent events,
// and (for the node's owner) invites, promotions, demotions and revocations.
"use strict";

(() => {
  const { el, api, banner, on, may, ago, shortId } = HN;
  let names = {};

  const EVENT_TEXT = {
    "community.created": (d) => `created the community ${d.name || ""}`,
    "member.invited": (d) => `invited ${who(d.node_id)} as ${d.level}`,
    "member.promoted": (d) => `set ${who(d.node_id)} to ${d.level}`,
    "member.demoted": (d) => `demoted ${who(d.node_id)} to ${d.level}`,
    "member.revoked": (d) => `revoked ${who(d.node_id)}${d.reason ? ` (${d.reason})` : ""}`,
    "rag.document.ingested": (d) => `added "${d.title || d.doc_cid}" to ${d.corpus}`,
    "rag.document.deleted": (d) => `deleted ${d.title ? `"${d.title}"` : shortId(d.doc_cid)} from ${d.corpus}`,
  };

  function who(nodeId) {
    return names[nodeId] || shortId(nodeId);
  }

  async function loadMesh() {
    let data;
    try {
      data = await api("/api/mesh");
    } catch (err) {
      banner(`Could not read the mesh: ${err.message}`, "bad");
      return;
    }
    names = {};
    for (const n of [...data.nodes, ...data.revoked]) if (n.name) names[n.node_id] = n.name;  // events name former members too
    const body = document.querySelector("#nodes tbody");
    body.replaceChildren(...data.nodes.map((n) => nodeRow(n, data)), ...data.revoked.map(revokedRow));
    const caps = document.getElementById("capabilities");
    caps.replaceChildren(...data.nodes.filter((n) => n.online).map(capabilities));
  }

  function nodeRow(n) {
    const name = n.name || "(name not known yet)";
    const state = n.online
      ? el("span", { class: "badge online", text: n.self ? "this node" : "online" })
      : el("span", { class: "badge offline", text: `offline · seen ${ago(n.last_seen)}` });
    const actions = el("div", { class: "actions" });
    if (may("anchor") && !n.self) {
      if (n.level !== "anchor") {
        const up = n.level === "member" ? "trusted" : "anchor";
        actions.append(button(`Promote to ${up}`, () => act("promote", n, up)));
      }
      if (n.level !== "member") {
        const down = n.level === "anchor" ? "trusted" : "member";
        actions.append(button(`Demote to ${down}`, () => act("demote", n, down)));
      }
      actions.append(button("Revoke", () => act("revoke", n), "danger small"));
    }
    return el(
      "tr",
      { attrs: { "data-node": n.node_id } },
      el("td", { text: name }),
      el("td", { class: "id hide-narrow", text: shortId(n.node_id), attrs: { title: n.node_id } }),
      el("td", {}, el("span", { class: `badge ${n.level}`, text: n.level })),
      el("td", {}, state),
      el("td", {}, actions),
    );
  }

  function revokedRow(r) {
    return el(
      "tr",
      { class: "revoked", attrs: { "data-node": r.node_id } },
      el("td", { text: r.name || "(name not known)" }),
      el("td", { class: "id hide-narrow", text: shortId(r.node_id), attrs: { title: r.node_id } }),
      el("td", {}, el("span", { class: "badge error", text: "revoked" })),
      el("td", {}, el("span", { class: "badge offline", text: "removed" })),
      el("td", {}),
    );
  }

  function button(text, fn, cls) {
    return el("button", { class: cls || "secondary small", text, attrs: { type: "button" }, on: { click: fn } });
  }

  async function act(action, n, level) {
    const name = n.name || shortId(n.node_id);
    let reason = null;
    let extra = null;
    if (action === "revoke") {
      reason = el("input", { attrs: { id: "revoke-reason", maxlength: 200, "aria-label": "Reason (optional)", placeholder: "Reason (optional)" } });
      extra = reason;
    }
    const titles = { promote: `Promote ${name}?`, demote: `Demote ${name}?`, revoke: `Revoke ${name}?` };
    const texts = {
      promote: `${name} becomes ${level}.`,
      demote: `${name} becomes ${level}.`,
      revoke: `${name} is removed from the community: every member drops its connection. This cannot be undone.`,
    };
    const ok = await HN.confirm(titles[action], texts[action], action === "revoke" ? "Revoke" : "Confirm", extra);
    if (!ok) return;
    const json = { node_id: n.node_id };
    if (level) json.level = level;
    if (reason) json.reason = reason.value;
    try {
      await api(`/api/mesh/${action}`, { method: "POST", json });
      banner(`${titles[action].replace("?", "")}: done.`, "ok", 5);
    } catch (err) {
      banner(`Could not ${action} ${name}: ${err.message}`, "bad");
    }
    await Promise.all([loadMesh(), loadEvents()]);
  }

  function capabilities(n) {
    const stats = n.stats || {};
    const rows = n.capabilities.map((ref) => {
      const s = stats[ref] || {};
      return el(
        "tr",
        {},
        el("td", { text: ref }),
        el("td", { class: "num", text: s.calls ?? "–" }),
        el("td", { class: "num", text: s.errors ?? "–" }),
        el("td", { class: "num", text: s.p50_ms === undefined || s.p50_ms === null ? "–" : `${Number(s.p50_ms).toFixed(1)} ms` }),
      );
    });
    const table = el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        { class: "table" },
        el("thead", {}, el("tr", {}, ...["Capability", "Calls", "Errors", "p50"].map((h, i) => el("th", { text: h, class: i ? "num" : "", attrs: { scope: "col" } })))),
        el("tbody", {}, ...rows),
      ),
    );
    const note = n.stats_error ? el("p", { class: "muted", text: `Figures not available: ${n.stats_error.message}` }) : null;
    return el("details", { class: "node-caps", attrs: { open: n.self } }, el("summary", { text: `${n.name || shortId(n.node_id)} · ${n.capabilities.length} capabilities` }), note, table);
  }

  function eventItem(ev) {
    const text = (EVENT_TEXT[ev.type] || (() => ev.type))(ev.data || {});
    const when = ev.wall_clock ? new Date(ev.wall_clock > 1e12 ? ev.wall_clock : ev.wall_clock * 1000) : null;
    return el(
      "li",
      { attrs: { "data-event": ev.event_id } },
      el("time", { text: when ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : "", attrs: { datetime: when ? when.toISOString() : null } }),
      el("strong", { text: who(ev.author) }),
      el("span", { text: text + (ev.effective === false ? " (no effect)" : "") }),
    );
  }

  async function loadEvents() {
    try {
      const data = await api("/api/events");
      document.getElementById("events").replaceChildren(...data.events.slice(0, 50).map(eventItem));
    } catch (err) {
      banner(`Could not read the events: ${err.message}`, "bad");
    }
  }

  function setUpInvite() {
    const form = document.getElementById("invite-form");
    if (!form) return;
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const nodeId = document.getElementById("invite-node").value.trim();
      const level = document.getElementById("invite-level").value;
      try {
        const out = await api("/api/mesh/invite", { method: "POST", json: { node_id: nodeId, level } });
        document.getElementById("invite-token").value = out.token;
        document.getElementById("invite-result").hidden = false;
        document.getElementById("invite-token").focus();
        document.getElementById("invite-token").select();
      } catch (err) {
        banner(`Could not create the invite: ${err.message}`, "bad");
      }
    });
    document.getElementById("invite-copy").addEventListener("click", async () => {
      const text = document.getElementById("invite-token").value;
      try {
        await navigator.clipboard.writeText(text);
        banner("Invite token copied.", "ok", 3);
      } catch (err) {
        document.getElementById("invite-token").select();
      }
    });
  }

  on("event", (ev) => {
    const list = document.getElementById("events");
    list.prepend(eventItem(ev));
    while (list.children.length > 50) list.lastChild.remove();
    if (String(ev.type).startsWith("member.") || String(ev.type).startsWith("community.")) loadMesh();
  });
  on("reconnected", () => {
    loadMesh();
    loadEvents();
  });

  document.addEventListener("DOMContentLoaded", () => {
    document.getElementById("refresh").addEventListener("click", () => Promise.all([loadMesh(), loadEvents()]));
    setUpInvite();
    loadMesh().then(loadEvents);
  });
})();
