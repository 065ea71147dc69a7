// HearthNet web UI: helpers every page uses. No inline script anywhere (CSP); text from the
// mesh (titles, passages, names, answers) only ever goes into the page through textContent.
"use strict";

const HN = (() => {
  const meta = (name) => {
    const m = document.querySelector(`meta[name="${name}"]`);
    return m ? m.getAttribute("content") : "";
  };
  const LEVELS = { member: 1, trusted: 2, anchor: 3 };
  const csrf = meta("hn-csrf");
  const level = meta("hn-level");
  const owner = meta("hn-owner") === "1";

  /** el("li", {class: "x", text: "y", attrs: {...}, on: {click: f}}, child, "text", ...) */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    const p = props || {};
    if (p.class) node.className = p.class;
    if (p.text !== undefined && p.text !== null) node.textContent = String(p.text);
    for (const [k, v] of Object.entries(p.attrs || {})) {
      if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const [k, v] of Object.entries(p.on || {})) node.addEventListener(k, v);
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, options) {
    const o = options || {};
    const headers = { Accept: "application/json" };
    if (o.method && o.method !== "GET") headers["X-CSRF-Token"] = csrf;
    let body;
    if (o.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(o.json);
    } else if (o.body !== undefined) {
      headers["Content-Type"] = o.type || "application/octet-stream";
      body = o.body; // a file, sent as it is
    }
    let response;
    try {
      response = await fetch(path, { method: o.method || "GET", headers, body, credentials: "same-origin" });
    } catch (err) {
      throw new ApiError(0, "partition", "the node is not answering");
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      if (response.status === 401) signedOut();
      throw new ApiError(response.status, data.error || "error", data.message || response.statusText);
    }
    return data;
  }

  /** POST a JSON body and read the answer's server-sent events: yields {event, data}. */
  async function* postEvents(path, json, signal) {
    const response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, Accept: "text/event-stream" },
      body: JSON.stringify(json),
      credentials: "same-origin",
      signal,
    });
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      if (response.status === 401) signedOut();
      throw new ApiError(response.status, data.error || "error", data.message || response.statusText);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data.push(line.slice(6));
        }
        if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
      }
    }
  }

  // -- banner ------------------------------------------------------------------------
  let bannerTimer = null;
  function banner(text, kind, seconds) {
    const b = document.getElementById("banner");
    if (!b) return;
    clearTimeout(bannerTimer);
    if (!text) {
      b.hidden = true;
      return;
    }
    b.textContent = text;
    b.className = `banner ${kind || "ok"}`;
    b.hidden = false;
    if (seconds) bannerTimer = setTimeout(() => (b.hidden = true), seconds * 1000);
  }

  let isSignedOut = false;
  function signedOut() {
    if (isSignedOut) return;
    isSignedOut = true;
    if (live) live.close();
    banner("You are signed out: this login was revoked or has expired. Ask for a new link.", "bad");
  }

  // -- the live stream: progress, events, and the node's restarts ----------------------
  const handlers = {};
  function on(kind, fn) {
    (handlers[kind] = handlers[kind] || []).push(fn);
  }
  function fire(kind, data) {
    for (const fn of handlers[kind] || []) {
      try {
        fn(data);
      } catch (err) {
        console.error(err);
      }
    }
  }

  let live = null;
  let boot = null;
  let lost = false;
  function connect() {
    live = new EventSource("/api/live");
    live.addEventListener("hello", (e) => {
      const hello = JSON.parse(e.data);
      if (boot !== null && hello.boot !== boot) {
        banner("The node restarted. Reconnected; the page is up to date.", "ok", 8);
        fire("reconnected", hello);
      } else if (lost) {
        banner("Reconnected to the node.", "ok", 5);
        fire("reconnected", hello);
      }
      boot = hello.boot;
      lost = false;
    });
    for (const kind of ["job", "event"]) {
      live.addEventListener(kind, (e) => fire(kind, JSON.parse(e.data)));
    }
    live.addEventListener("error", () => {
      if (isSignedOut) return;
      if (!lost) banner("Lost contact with the node (stopped or restarting). Retrying…", "warn");
      lost = true;
      if (live.readyState === EventSource.CLOSED) {
        // refused rather than unreachable: find out why, then try again
        api("/api/session").then(
          () => setTimeout(connect, 1000),
          (err) => (err.status === 401 ? signedOut() : setTimeout(connect, 1000)),
        );
      }
    });
  }

  // -- small formatters ----------------------------------------------------------------
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    let v = Number(n);
    while (v >= 1000 && i < units.length - 1) {
      v /= 1000;
      i += 1;
    }
    return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
  }
  function ago(seconds) {
    if (seconds === null || seconds === undefined) return "never";
    const s = Math.max(0, Date.now() / 1000 - seconds);
    if (s < 60) return "just now";
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} days ago`;
  }
  function shortId(id) {
    const text = String(id || "");
    return text.length > 22 ? `${text.slice(0, 16)}…${text.slice(-4)}` : text;
  }
  function may(needed) {
    return (LEVELS[level] || 0) >= LEVELS[needed];
  }

  /** Ask in the page's <dialog id="confirm">; resolves true when confirmed. */
  function confirm(title, text, okLabel, extra) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-h").textContent = title;
    document.getElementById("confirm-text").textContent = text;
    document.getElementById("confirm-ok").textContent = okLabel || "Confirm";
    const slot = document.getElementById("confirm-extra");
    if (slot) slot.replaceChildren(...(extra ? [extra] : []));
    dialog.returnValue = "";
    dialog.showModal();
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const logout = document.getElementById("logout");
    if (logout) {
      logout.addEventListener("click", async () => {
        await api("/api/logout", { method: "POST" }).catch(() => {});
        window.location.replace("/login");
      });
    }
    connect();
  });

  return { el, api, postEvents, ApiError, banner, on, bytes, ago, shortId, may, confirm, level, owner };
})();
