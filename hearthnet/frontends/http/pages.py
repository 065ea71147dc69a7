"""The HTML of each page, rendered on the server; data arrives through the JSON API.

Every text put into a page passes through :func:`html.escape`.  No page has inline script or
style (the Content-Security-Policy forbids both): behaviour is in ``static/*.js``, which builds
the DOM with ``textContent``.  Controls a login may not use are not rendered at all.
"""

from __future__ import annotations

from html import escape

from hearthnet.community.levels import Level
from hearthnet.contracts import formats
from hearthnet.contracts.rag import CORPUS_PATTERN
from hearthnet.frontends.http.tokens import Session

__all__ = ["ask_page", "library_page", "login_page", "mesh_page"]

NAV = (("ask", "/ask", "Ask"), ("library", "/library", "Library"), ("mesh", "/mesh", "Mesh"))


def _layout(title: str, body: str, *, scripts: tuple[str, ...], head: str = "", nav: str = "") -> str:
    tags = "".join(f'<script src="/static/{escape(s)}" defer></script>' for s in scripts)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · HearthNet</title>"
        '<link rel="stylesheet" href="/static/app.css">'
        '<link rel="icon" href="/static/icon.svg" type="image/svg+xml">'
        f"{head}{tags}</head><body>"
        '<a class="skip" href="#main">Skip to content</a>'
        f"{nav}"
        '<div id="banner" class="banner" role="status" aria-live="polite" hidden></div>'
        f'<main id="main" tabindex="-1">{body}</main>'
        "</body></html>\n"
    )


_CONFIRM_DIALOG = """
<dialog id="confirm" aria-labelledby="confirm-h"><form method="dialog">
  <h2 id="confirm-h">Are you sure?</h2><p id="confirm-text"></p>
  <div id="confirm-extra"></div>
  <div class="row end"><button value="cancel" class="secondary">Cancel</button>
  <button value="ok" id="confirm-ok" class="danger">Confirm</button></div></form></dialog>"""
"""The dialog every page of the app asks "Are you sure?" with (common.js opens it)."""


def _app_page(active: str, session: Session, node_name: str, body: str, *, scripts: tuple[str, ...]) -> str:
    """A page of the signed-in app: its header, ``body``, the confirm dialog, common.js and ``scripts``."""
    nav, head = _chrome(active, session, node_name)
    title = next(label for key, _, label in NAV if key == active)
    return _layout(title, body + _CONFIRM_DIALOG, scripts=("common.js", *scripts), head=head, nav=nav)


def _chrome(active: str, session: Session, node_name: str) -> tuple[str, str]:
    """The header (node, navigation, who is signed in) and the meta tags the scripts read."""
    current = ' aria-current="page"'
    links = "".join(
        f'<li><a href="{href}"{current if key == active else ""}>{label}</a></li>' for key, href, label in NAV
    )
    who = f"{escape(session.name)} · {escape(session.level.label)}"
    nav = (
        '<header class="top"><div class="brand"><span class="logo" aria-hidden="true">◠</span>'
        f'<span>HearthNet</span> <span class="node" title="this node">{escape(node_name)}</span></div>'
        f'<nav aria-label="Main"><ul>{links}</ul></nav>'
        f'<div class="who"><span>{who}</span>'
        '<button type="button" id="logout" class="link">Sign out</button></div></header>'
    )
    if session.revoked:  # every page says it: nothing here reaches the community any more
        text = session.revoked[0].upper() + session.revoked[1:]
        nav += f'<p id="revoked" class="banner bad" role="alert">{escape(text)}.</p>'
    head = (
        f'<meta name="hn-csrf" content="{escape(session.csrf)}">'
        f'<meta name="hn-level" content="{escape(session.level.label)}">'
        f'<meta name="hn-owner" content="{"1" if session.owner else "0"}">'
    )
    return nav, head


def ask_page(session: Session, node_name: str) -> str:
    body = f"""
<div class="ask">
  <aside class="sessions" aria-labelledby="sessions-h">
    <div class="row"><h2 id="sessions-h">Chats</h2>
      <button type="button" id="new-chat" class="secondary">New chat</button></div>
    <ul id="session-list" class="session-list"></ul>
    <p id="sessions-empty" class="muted">No chats yet.</p>
  </aside>
  <section class="chat" aria-labelledby="chat-h">
    <h1 id="chat-h" class="visually-hidden">Ask your documents</h1>
    <p id="chat-empty" class="muted intro">Ask a question about the documents of your community.
      Answers cite their sources: open a numbered chip to see the passage and the page.</p>
    <div class="chat-head">
      <ul id="attachments" class="attachments" aria-label="Documents in this chat"></ul>
      <button type="button" id="export-chat" class="secondary" hidden>Export as Markdown</button>
    </div>
    <ol id="messages" class="messages" aria-live="polite"></ol>
    <form id="ask-form" class="ask-form">
      <label for="question" class="visually-hidden">Your question</label>
      <textarea id="question" name="question" rows="2" required maxlength="4000"
        placeholder="Ask a question…"></textarea>
      <div class="ask-tools">
        <details id="corpora-picker" class="corpora-picker">
          <summary>Search in: <span id="corpora-summary">all corpora</span></summary>
          <fieldset><legend class="visually-hidden">Corpora to search</legend>
            <div id="corpora-options" class="options"></div></fieldset>
        </details>
        <button type="button" id="attach" class="secondary" aria-label="Attach a document to this chat"
          title="Attach a document to this chat: it is searched for this chat's questions only"><svg
          aria-hidden="true" class="icon" viewBox="0 0 24 24" width="16" height="16" fill="none"
          stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round"><path
          d="M21.44 11.05l-9.19 9.19a6 6 0 0 1-8.49-8.49l9.19-9.19a4 4 0 0 1 5.66 5.66l-9.2 9.19a2 2 0 0
          1-2.83-2.83l8.49-8.48"/></svg> Attach</button>
        <input type="file" id="pick-attachment" class="visually-hidden" tabindex="-1" aria-hidden="true"
          accept="{formats.accept()}">
        <label for="model" class="visually-hidden">Answered by</label>
        <select id="model" title="Who answers in this chat">
          <option value="">Model: the node's choice</option>
          <option value="extractive">Extractive only (no model)</option>
        </select>
        <label class="toggle"><input type="checkbox" id="debug"> Debug</label>
        <button type="submit" id="ask-button">Ask</button>
      </div>
    </form>
  </section>
</div>"""
    return _app_page("ask", session, node_name, body, scripts=("ask.js",))


def library_page(session: Session, node_name: str) -> str:
    upload = ""
    if session.level >= Level.TRUSTED:
        upload = f"""
  <section class="card" aria-labelledby="upload-h">
    <h2 id="upload-h">Add documents</h2>
    <div class="upload-target">
      <label for="upload-corpus">Corpus</label>
      <input id="upload-corpus" list="corpus-names" required pattern="{CORPUS_PATTERN}"
        value="household" autocomplete="off" aria-describedby="corpus-hint">
      <datalist id="corpus-names"></datalist>
      <span id="corpus-hint" class="muted">lowercase letters, digits and '-'</span>
    </div>
    <div id="dropzone" class="dropzone">
      <p id="drop-hint"><strong>Drop files or folders here</strong><br>
        {escape(formats.supported_text())} files; each one is read, split and indexed.</p>
      <div class="pickers">
        <button type="button" id="choose-files" class="secondary">Choose files</button>
        <button type="button" id="choose-folder" class="secondary">Choose a folder</button>
        <input type="file" id="pick-files" multiple class="visually-hidden" tabindex="-1"
          aria-hidden="true" accept="{formats.accept()}">
        <input type="file" id="pick-folder" webkitdirectory multiple class="visually-hidden"
          tabindex="-1" aria-hidden="true">
      </div>
    </div>
    <ul id="uploads" class="uploads" aria-live="polite"></ul>
  </section>"""
    folders = ""
    if session.owner:  # the node's own disk: its owner's business
        folders = """
  <section class="card" aria-labelledby="folders-h" id="folders-card">
    <div class="row"><h2 id="folders-h">Watched folders</h2>
      <span class="muted">'hearthnet watch add DIR --corpus C' adds one</span></div>
    <div class="table-wrap"><table id="folders" class="table">
      <caption class="visually-hidden">Folders this node keeps indexed</caption>
      <thead><tr><th scope="col">Folder</th><th scope="col">Corpus</th>
        <th scope="col" class="num">Indexed</th><th scope="col" class="num">Pending</th>
        <th scope="col" class="num">Failed</th><th scope="col" class="hide-narrow">Last change</th>
        <th scope="col">State</th></tr></thead>
      <tbody></tbody></table></div>
    <ul id="folder-failures" class="muted"></ul>
    <p id="folders-empty" class="muted" hidden>No watched folder.</p>
  </section>"""
    body = f"""
<h1>Library</h1>
<div class="library">
  <section class="card" aria-labelledby="corpora-h">
    <div class="row"><h2 id="corpora-h">Corpora</h2>
      <button type="button" id="refresh" class="secondary">Refresh</button></div>
    <div class="table-wrap"><table id="corpora" class="table">
      <caption class="visually-hidden">Corpora of the community</caption>
      <thead><tr><th scope="col">Corpus</th><th scope="col" class="num">Documents</th>
        <th scope="col" class="num hide-narrow">Chunks</th><th scope="col" class="num hide-narrow">Size</th>
        <th scope="col" class="hide-narrow">Model</th><th scope="col">Host</th><th scope="col">State</th>
      </tr></thead>
      <tbody></tbody></table></div>
    <p id="corpora-empty" class="muted" hidden>No corpus yet.</p>
  </section>
  <section class="card" aria-labelledby="docs-h" id="documents-card" hidden>
    <h2 id="docs-h">Documents of <span id="docs-corpus"></span></h2>
    <div class="table-wrap"><table id="documents" class="table">
      <thead><tr><th scope="col">Title</th><th scope="col">File</th>
        <th scope="col" class="num hide-narrow">Pages</th><th scope="col" class="num">Chunks</th>
        <th scope="col" class="hide-narrow">Added</th>
        <th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
      <tbody></tbody></table></div>
    <p id="documents-empty" class="muted" hidden>No documents.</p>
  </section>{folders}{upload}
</div>"""
    scripts = ("library.js", "folders.js") if folders else ("library.js",)
    return _app_page("library", session, node_name, body, scripts=scripts)


def mesh_page(session: Session, node_name: str) -> str:
    invite = ""
    if session.level >= Level.ANCHOR:
        invite = """
  <section class="card" aria-labelledby="invite-h">
    <h2 id="invite-h">Invite a device</h2>
    <p class="muted">On the new device run <code>hearthnet init</code>, then paste its node id here.</p>
    <form id="invite-form" class="inline-form">
      <label for="invite-node">Node id</label>
      <input id="invite-node" required placeholder="ed25519:…" autocomplete="off" spellcheck="false">
      <label for="invite-level">Level</label>
      <select id="invite-level">
        <option>member</option><option>trusted</option><option>anchor</option></select>
      <button type="submit">Create invite</button>
    </form>
    <div id="invite-result" hidden>
      <label for="invite-token">Invite token: run <code>hearthnet join TOKEN</code> on the device</label>
      <textarea id="invite-token" readonly rows="3"></textarea>
      <button type="button" id="invite-copy" class="secondary">Copy</button>
    </div>
  </section>"""
    body = f"""
<h1>Mesh</h1>
<div class="mesh">
  <section class="card" aria-labelledby="nodes-h">
    <div class="row"><h2 id="nodes-h">Members</h2>
      <button type="button" id="refresh" class="secondary">Refresh</button></div>
    <div class="table-wrap"><table id="nodes" class="table">
      <thead><tr><th scope="col">Name</th><th scope="col" class="hide-narrow">Node id</th>
        <th scope="col">Level</th>
        <th scope="col">State</th>
        <th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
      <tbody></tbody></table></div>
  </section>
  <section class="card" aria-labelledby="caps-h">
    <h2 id="caps-h">Capabilities</h2>
    <div id="capabilities"></div>
  </section>
  <section class="card" aria-labelledby="events-h">
    <h2 id="events-h">Recent events</h2>
    <ol id="events" class="events"></ol>
  </section>{invite}
</div>"""
    return _app_page("mesh", session, node_name, body, scripts=("mesh.js",))


def login_page(navigation: str) -> str:
    """The sign-in page; ``navigation`` (``app.navigation``) tells its script whether another site
    sent the browser here, in which case a link is acted on only after a click."""
    body = """
<div class="login card">
  <h1><span class="logo" aria-hidden="true">◠</span> HearthNet</h1>
  <p id="login-status" role="status">To sign in, open the link that <code>hearthnet ui</code> prints on
    the node's computer, or the personal link the node's owner gave you.</p>
  <div id="login-confirm" hidden>
    <p id="login-current"></p>
    <p id="login-would"></p>
    <p id="login-origin" class="muted" hidden>This sign-in link was opened from another site. Use it
      only if you meant to.</p>
    <div class="row"><button type="button" id="login-switch">Sign in</button>
      <button type="button" id="login-stay" class="secondary">Cancel</button></div>
  </div>
  <p><a id="login-continue" href="/ask" hidden>Continue</a></p>
</div>"""
    head = f'<meta name="hn-navigation" content="{escape(navigation)}">'
    return _layout("Sign in", body, scripts=("login.js",), head=head)
