// Sign-in: the link carries the token after '#', so it never reaches a log or a Referer; it is
// exchanged once for a session cookie (HttpOnly, SameSite=Strict) and removed from the address.
// A link never silently replaces a live session, and a link another site sent the browser to is
// never acted on by itself (login CSRF): then the page shows who you are and who the link would
// make you, and signs in only when you click.
"use strict";

async function postJson(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await response.json().catch(() => ({}));
  return { ok: response.ok, data };
}

function who(person) {
  return `${person.name} (${person.level})`;
}

async function signIn(status, token, replace) {
  status.textContent = "Signing you in…";
  const { ok, data } = await postJson("/api/login", { token, replace });
  if (!ok) {
    status.textContent = data.message || "This link does not work.";
    return;
  }
  status.textContent = `Signed in as ${who(data)}.`;
  document.getElementById("login-continue").hidden = false;
  window.location.replace("/ask");
}

function ask(status, token, preview, foreign) {
  const box = document.getElementById("login-confirm");
  const current = preview.current;
  document.getElementById("login-current").textContent = current
    ? `You are signed in as ${who(current)}.`
    : "You are not signed in.";
  document.getElementById("login-would").textContent =
    `This link would sign you in as ${who(preview.link)}` + (current ? " instead." : ".");
  document.getElementById("login-origin").hidden = !foreign;
  const go = document.getElementById("login-switch");
  go.textContent = `Sign in as ${preview.link.name}`;
  const stay = document.getElementById("login-stay");
  stay.textContent = current ? `Stay as ${current.name}` : "Cancel";
  status.textContent = "Check who this link signs in before you use it.";
  box.hidden = false;
  go.addEventListener("click", () => {
    box.hidden = true;
    signIn(status, token, true);
  }, { once: true });
  stay.addEventListener("click", () => {
    if (current) {
      window.location.replace("/ask");
    } else {
      box.hidden = true;
      status.textContent = "Nothing changed: you are not signed in.";
    }
  }, { once: true });
  go.focus();
}

document.addEventListener("DOMContentLoaded", async () => {
  const status = document.getElementById("login-status");
  const token = decodeURIComponent(window.location.hash.slice(1));
  if (!token) return;
  history.replaceState(null, "", "/login");
  const meta = document.querySelector('meta[name="hn-navigation"]');
  const navigation = meta ? meta.content : "unknown";
  const foreign = navigation !== "none" && navigation !== "same-origin";
  let preview;
  try {
    preview = await postJson("/api/login/preview", { token });
  } catch (err) {
    status.textContent = "The node is not answering. Is it running?";
    return;
  }
  if (!preview.ok) {
    status.textContent = preview.data.message || "This link does not work.";
    return;
  }
  if (preview.data.current || foreign) {
    ask(status, token, preview.data, foreign);
    return;
  }
  try {
    await signIn(status, token, false);
  } catch (err) {
    status.textContent = "The node is not answering. Is it running?";
  }
});
