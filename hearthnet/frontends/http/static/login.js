// Sign-in: the link carries the token after '#', so it never reaches a log or a Referer; it is
// exchanged once for a session cookie (HttpOnly, SameSite=Strict) and removed from the address.
"use strict";

document.addEventListener("DOMContentLoaded", async () => {
  const status = document.getElementById("login-status");
  const token = decodeURIComponent(window.location.hash.slice(1));
  if (!token) return;
  history.replaceState(null, "", "/login");
  status.textContent = "Signing you in…";
  let response;
  try {
    response = await fetch("/api/login", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ token }),
      credentials: "same-origin",
    });
  } catch (err) {
    status.textContent = "The node is not answering. Is it running?";
    return;
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    status.textContent = data.message || "This link does not work.";
    return;
  }
  status.textContent = `Signed in as ${data.name} (${data.level}).`;
  const next = document.getElementById("login-continue");
  next.hidden = false;
  window.location.replace("/ask");
});
