"""The web UI in a real headless Chromium (Debian's), by what a person sees on the page.

One mesh and one browser for the module: A (founder, embedding and RAG) and B (member, no
services).  Each scenario ends with assertions on the page and a screenshot under
``tests/artifacts/``.  The node restart comes last.  Every scenario runs alone too
(``-k NAME``): the browser is signed in as the owner before each (``owner`` fixture), and what
a scenario reads is made first if an earlier one did not make it (the ``papers`` corpus, an
answer with a citation on the Ask page).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode
from tests.shared_data import PDF_DIR
from tests.ui.harness import (
    chromium,
    css,
    fetch,
    owner_link,
    owner_signed_in,
    person_link,
    screenshot,
    sign_in,
    skip_without_browser,
    text_of,
    ui_url,
    wait,
)

pytestmark = pytest.mark.slow

PAPER = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    skip_without_browser()
    m = LocalMesh(tmp_path_factory.mktemp("ui-browser"))
    m.env["HEARTHNET_OCR"] = "0"  # no OCR provider in the mesh: a scan is refused ("run OCR first")
    try:
        a = m.add("kitchen", env=UI_ENV)
        b = m.add("attic", env={**UI_ENV, "HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"})
        m.found(a)
        m.invite(a, b, "member")
        m.wait_full_mesh(timeout=90)
        yield m
    finally:
        m.close()


@pytest.fixture(scope="module")
def driver(mesh: LocalMesh) -> Iterator[Any]:
    with chromium() as d:
        d.set_page_load_timeout(30)
        d.set_script_timeout(30)
        yield d


def a_node(mesh: LocalMesh) -> MeshNode:
    return mesh.nodes["kitchen"]


@pytest.fixture(autouse=True)
def owner(mesh: LocalMesh, driver: Any) -> None:
    """The browser signed in as the node's owner (a scenario may have signed in as someone else,
    signed out, or not run at all before this one)."""
    a = a_node(mesh)
    if not a.process or a.process.poll() is not None:
        return  # a node left stopped by a failed restart scenario: the scenario says so itself
    owner_signed_in(driver, a, "/login")


@pytest.fixture
def papers(mesh: LocalMesh) -> None:
    """The corpus ``papers`` holding the paper: the upload scenario makes it; alone, the CLI does."""
    a = a_node(mesh)
    caps = a.cli_json("status", timeout=10)["capabilities"]
    if not any(
        c["params"].get("corpus") == "papers" for c in caps if c["capability"].startswith("rag.query@")
    ):
        a.cli_json("ingest", str(PAPER), "--corpus", "papers", timeout=300)


def watch_uploads(driver: Any) -> None:
    """Record every text the upload list shows (a MutationObserver), to see progress happen."""
    driver.execute_script(
        """
        window.__seen = [];
        new MutationObserver(() => {
          for (const li of document.querySelectorAll('#uploads li')) window.__seen.push(li.textContent);
        }).observe(document.getElementById('uploads'),
                   {subtree: true, childList: true, characterData: true});
        """
    )


def choose_files(driver: Any, *paths: Path) -> None:
    css(driver, "#pick-files")[0].send_keys("\n".join(str(p) for p in paths))


def upload_items(driver: Any) -> list[dict[str, str]]:
    return list(
        driver.execute_script(
            "return [...document.querySelectorAll('#uploads li')].map(li => ({name: li.querySelector('.name')"
            ".textContent, state: li.querySelector('.state').textContent, cls: li.className}))"
        )
    )


def shows_a_page(driver: Any) -> bool:
    """The browser's PDF viewer has drawn a page: a tenth of the window is white paper."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("L")
    histogram = image.histogram()
    return sum(histogram[250:]) > 0.1 * image.width * image.height


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert  # noqa: B018
    except NoAlertPresentException:
        return True
    return False


# -- scenarios -------------------------------------------------------------------------------
def test_sign_in_with_the_link(mesh: LocalMesh, driver: Any) -> None:
    a = a_node(mesh)
    link = owner_link(a)
    sign_in(driver, link)
    assert "owner · anchor" in text_of(driver, ".who")
    assert "kitchen" in text_of(driver, ".brand")
    assert "#" not in driver.current_url  # the token left the address bar
    screenshot(driver, "01-signed-in")
    driver.get(link)  # an owner link works once
    wait(driver, lambda d: "already used" in text_of(d, "#login-status"), what="the used link to be refused")
    screenshot(driver, "01b-link-used")
    driver.get(ui_url(a) + "/ask")  # still signed in from the first use
    assert "owner · anchor" in text_of(driver, ".who")


def test_upload_a_real_pdf_and_watch_its_progress_reach_done(mesh: LocalMesh, driver: Any) -> None:
    driver.get(ui_url(a_node(mesh)) + "/library")
    wait(driver, lambda d: css(d, "#pick-files"), what="the upload controls")
    corpus = css(driver, "#upload-corpus")[0]
    corpus.clear()
    corpus.send_keys("papers")
    watch_uploads(driver)
    choose_files(driver, PAPER)
    wait(
        driver,
        lambda d: any(i["name"] == PAPER.name and "done" in i["cls"] for i in upload_items(d)),
        timeout=300,
        what="the paper's upload to finish",
    )
    item = next(i for i in upload_items(driver) if i["name"] == PAPER.name)
    assert item["state"].startswith("Done: ") and "chunks indexed in papers" in item["state"], item
    seen = " | ".join(driver.execute_script("return window.__seen"))
    assert "Uploading" in seen or "Storing" in seen, seen
    assert "Embedding" in seen or "Writing the index" in seen, seen  # rag.ingest's own frames
    done = driver.execute_script(
        "const p = document.querySelector('#uploads li.done progress'); return [p.value, p.max]"
    )
    assert done[0] == done[1] == 1
    wait(driver, lambda d: "papers" in text_of(d, "#corpora tbody"), what="the new corpus in the table")
    screenshot(driver, "02-upload-done")


def test_scanned_and_encrypted_pdfs_show_their_errors(mesh: LocalMesh, driver: Any) -> None:
    driver.get(ui_url(a_node(mesh)) + "/library")
    wait(driver, lambda d: css(d, "#pick-files"), what="the upload controls")
    scanned, encrypted = (
        PDF_DIR / "scanned_image_only_no_text.pdf",
        PDF_DIR / "encrypted_password_openpassword.pdf",
    )
    choose_files(driver, scanned, encrypted)
    wait(
        driver,
        lambda d: sum("error" in i["cls"] for i in upload_items(d)) >= 2,
        timeout=120,
        what="both uploads to fail",
    )
    states = {i["name"]: i["state"] for i in upload_items(driver)}
    assert "run OCR first" in states[scanned.name], states
    assert "password" in states[encrypted.name], states
    assert states[scanned.name].startswith("Failed: ")
    screenshot(driver, "03-upload-errors")


def ask(driver: Any, question: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = css(driver, "#question")[0]
    box.clear()
    box.send_keys(question)
    box.send_keys(Keys.ENTER)


def answered(mesh: LocalMesh, driver: Any) -> None:
    """An answer with a citation chip on the Ask page (the ask scenario leaves one; alone, ask)."""
    if "/ask" in driver.current_url and css(driver, "#messages .chip"):
        return
    driver.get(ui_url(a_node(mesh)) + "/ask")
    wait(driver, lambda d: css(d, "#question"), what="the Ask page")
    ask(driver, "What is unrestricted relation discovery?")
    wait(driver, lambda d: css(d, "#messages .chip"), timeout=120, what="an answer with a citation chip")


@pytest.mark.usefixtures("papers")
def test_ask_a_question_and_see_the_streamed_answer_with_a_citation(mesh: LocalMesh, driver: Any) -> None:
    driver.get(ui_url(a_node(mesh)) + "/ask")
    wait(
        driver,
        lambda d: (
            "papers" in d.execute_script("return document.getElementById('corpora-options').textContent")
        ),
        what="the corpora to search",
    )
    driver.execute_script(
        """
        window.__steps = [];
        new MutationObserver(() => {
          const s = document.querySelector('#messages .status');
          const t = document.querySelector('#messages .text');
          if (s) window.__steps.push([s.textContent, t ? t.textContent.length : 0]);
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true});
        """
    )
    ask(driver, "What is unrestricted relation discovery?")
    wait(driver, lambda d: css(d, "#messages .chip"), timeout=120, what="an answer with a citation chip")
    steps = driver.execute_script("return window.__steps")
    assert any(text.startswith("Searching") for text, _ in steps), steps
    assert any(text == "Writing…" and shown > 0 for text, shown in steps), steps  # text before the end
    answer = text_of(driver, "#messages .answer .text")
    assert len(answer) > 40 and "#" not in answer  # citation markers became chips
    assert "Extractive answer" in text_of(driver, "#messages .mode")  # no language model here
    assert text_of(driver, "#messages .chip").startswith("1")
    assert "What is unrestricted relation discovery?" in text_of(driver, "#session-list")
    screenshot(driver, "05-ask-answer")


@pytest.mark.usefixtures("papers")
def test_open_the_citation_lands_on_the_pdf_at_its_page(mesh: LocalMesh, driver: Any) -> None:
    answered(mesh, driver)
    chip = css(driver, "#messages .chip")[0]
    chip.click()
    wait(driver, lambda d: css(d, ".citation .passage"), what="the citation's passage")
    card = text_of(driver, ".citation")
    assert "papers" in card and "kitchen" in card and PAPER.name in card, card
    page = int(
        driver.execute_script("return document.querySelector('.citation dl dd:nth-of-type(3)').textContent")
    )
    assert page >= 1
    link = css(driver, ".citation a.open-source")[0]
    assert link.get_attribute("href").endswith(f"#page={page}")
    screenshot(driver, "06-citation")
    ask_window = driver.current_window_handle
    link.click()
    wait(driver, lambda d: len(d.window_handles) == 2, what="the PDF to open in a new tab")
    driver.switch_to.window(next(h for h in driver.window_handles if h != ask_window))
    try:
        wait(driver, lambda d: "/files/" in d.current_url, what="the PDF's address")
        assert driver.current_url.endswith(f"#page={page}"), driver.current_url
        assert driver.execute_script("return document.contentType") == "application/pdf"
        wait(driver, shows_a_page, timeout=30, what="the browser's PDF viewer to show a page")
        screenshot(driver, "06b-pdf-at-page")
    finally:
        driver.close()
        driver.switch_to.window(ask_window)


@pytest.mark.usefixtures("papers")
def test_debug_shows_chunk_ids_scores_and_timings(mesh: LocalMesh, driver: Any) -> None:
    driver.get(ui_url(a_node(mesh)) + "/ask")
    wait(driver, lambda d: css(d, "#debug"), what="the Ask page")
    css(driver, "#debug")[0].click()
    ask(driver, "Which relations does the system discover between entities?")
    wait(driver, lambda d: len(css(d, "#messages .answer details")) >= 1, timeout=120, what="the debug panel")
    panel = text_of(driver, "#messages .answer details summary")
    assert "retrieve" in panel and "total" in panel and " ms" in panel, panel
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#messages .answer details tbody tr')].map(r => r.textContent)"
    )
    assert rows and all("papers" in r for r in rows), rows
    css(driver, "#debug")[0].click()
    screenshot(driver, "06c-debug")


@pytest.mark.usefixtures("papers")
def test_chats_at_the_side_can_be_renamed_and_deleted(mesh: LocalMesh, driver: Any) -> None:
    answered(mesh, driver)  # at least one chat
    driver.get(ui_url(a_node(mesh)) + "/ask")
    wait(driver, lambda d: css(d, "#session-list li"), what="the chats")
    before = len(css(driver, "#session-list li"))
    first = css(driver, "#session-list li")[0]
    first.find_elements("css selector", ".tools button")[0].click()  # Rename
    wait(
        driver,
        lambda d: d.execute_script("return document.getElementById('confirm').open"),
        what="the dialog",
    )
    name = css(driver, "#confirm-extra input")[0]
    name.clear()
    name.send_keys("Relation discovery")
    css(driver, "#confirm-ok")[0].click()
    wait(driver, lambda d: "Relation discovery" in text_of(d, "#session-list"), what="the new name")
    screenshot(driver, "06d-chats-renamed")
    row = next(li for li in css(driver, "#session-list li") if "Relation discovery" in li.text)
    row.find_elements("css selector", ".tools button")[1].click()  # Delete
    assert "Relation discovery" in confirm_dialog(driver, accept=True)
    wait(driver, lambda d: len(css(d, "#session-list li")) == before - 1, what="the chat to go")
    assert "Relation discovery" not in text_of(driver, "#session-list")


def test_a_title_with_markup_shows_as_text(mesh: LocalMesh, driver: Any, tmp_path: Path) -> None:
    import pypdf

    title = "<img src=x onerror=alert(1)>"
    writer = pypdf.PdfWriter(
        clone_from=pypdf.PdfReader(Path(__file__).parents[2] / "hearthnet/demo/garden_and_seeds.pdf")
    )
    writer.add_metadata({"/Title": title})
    hostile = tmp_path / "hostile.pdf"
    with hostile.open("wb") as f:
        writer.write(f)
    a = a_node(mesh)
    driver.get(ui_url(a) + "/library")
    wait(driver, lambda d: css(d, "#pick-files"), what="the upload controls")
    corpus = css(driver, "#upload-corpus")[0]
    corpus.clear()
    corpus.send_keys("hostile")
    choose_files(driver, hostile)
    wait(
        driver,
        lambda d: any(i["name"] == "hostile.pdf" and "done" in i["cls"] for i in upload_items(d)),
        timeout=120,
        what="the hostile PDF to be indexed",
    )
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="hostile"] button'), what="the corpus row")
    css(driver, '#corpora tr[data-corpus="hostile"] button')[0].click()
    wait(driver, lambda d: title in text_of(d, "#documents tbody"), what="the title shown as text")
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    assert no_alert(driver)
    screenshot(driver, "04-markup-title-library")
    css(driver, "#documents tbody tr button")[0].click()  # Delete, then confirm
    assert title in confirm_dialog(driver, accept=True)
    wait(driver, lambda d: title not in text_of(d, "#documents tbody"), what="the document to be deleted")
    assert no_alert(driver)
    driver.get(ui_url(a) + "/mesh")
    wait(driver, lambda d: title in text_of(d, "#events"), what="the ingest event with its title as text")
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    assert no_alert(driver)
    screenshot(driver, "04b-markup-title-mesh")


@pytest.mark.usefixtures("papers")
def test_an_ingest_by_someone_else_appears_without_a_reload(mesh: LocalMesh, driver: Any) -> None:
    a = a_node(mesh)
    driver.get(ui_url(a) + "/library")
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="papers"]'), what="the corpora")
    driver.execute_script("window.__same_page = true")
    demo = Path(__file__).parents[2] / "hearthnet" / "demo" / "heating_handbook.pdf"
    ingested = a.cli_json("ingest", str(demo), "--corpus", "elsewhere")  # the CLI, not this page
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="elsewhere"]'), what="the new corpus to appear")
    css(driver, '#corpora tr[data-corpus="elsewhere"] button')[0].click()
    wait(driver, lambda d: "Heating and Hot Water Handbook" in text_of(d, "#documents"), what="its document")
    screenshot(driver, "05b-ingest-elsewhere")
    a.cli("delete", ingested["results"][0]["doc_cid"], "--corpus", "elsewhere")
    wait(
        driver,
        lambda d: "Heating and Hot Water Handbook" not in text_of(d, "#documents"),
        what="the deleted document to go",
    )
    assert driver.execute_script("return window.__same_page === true")  # no reload happened
    screenshot(driver, "05c-delete-elsewhere")


def test_a_post_without_the_csrf_token_is_refused(mesh: LocalMesh, driver: Any) -> None:
    driver.get(ui_url(a_node(mesh)) + "/mesh")
    wait(driver, lambda d: css(d, "#nodes tbody tr"), what="the members")
    body = {"node_id": mesh.nodes["attic"].node_id, "level": "trusted"}
    refused = fetch(driver, "POST", "/api/mesh/promote", body, csrf=False)
    assert refused["status"] == 403 and "CSRF" in json.loads(refused["body"])["message"]
    levels = driver.execute_script(
        "return [...document.querySelectorAll('#nodes tbody tr')].map(r => r.children[2].textContent)"
    )
    assert sorted(levels) == ["anchor", "member"]
    screenshot(driver, "05-mesh")


@pytest.mark.usefixtures("papers")
def test_a_members_link_shows_no_upload_or_delete_and_its_posts_get_403(mesh: LocalMesh, driver: Any) -> None:
    a = a_node(mesh)
    sign_in(driver, person_link(a, "Robin", "member"))
    assert "Robin · member" in text_of(driver, ".who")
    driver.get(ui_url(a) + "/library")
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="papers"] button'), what="the corpora")
    css(driver, '#corpora tr[data-corpus="papers"] button')[0].click()
    wait(driver, lambda d: css(d, "#documents tbody tr"), what="the documents")
    assert not css(driver, "#dropzone") and not css(driver, "#pick-files")
    assert "Delete" not in text_of(driver, "#documents")
    doc = driver.execute_script("return document.querySelector('#documents tbody tr').dataset.doc")
    refused = [
        fetch(driver, "POST", "/api/documents/delete", {"corpus": "papers", "doc_cid": doc}),
        fetch(driver, "POST", "/api/upload?corpus=papers&name=x.pdf", "x"),
        fetch(driver, "POST", "/api/mesh/invite", {"node_id": mesh.nodes["attic"].node_id}),
    ]
    assert [r["status"] for r in refused] == [403, 403, 403], refused
    screenshot(driver, "06-member-library")
    driver.get(ui_url(a) + "/mesh")
    wait(driver, lambda d: css(d, "#nodes tbody tr"), what="the members")
    assert not css(driver, "#invite-form") and "Revoke" not in text_of(driver, "#nodes")
    screenshot(driver, "06b-member-mesh")


def test_without_a_session_every_endpoint_is_refused(mesh: LocalMesh, driver: Any) -> None:
    a = a_node(mesh)
    driver.get(ui_url(a) + "/library")
    driver.delete_all_cookies()
    driver.get(ui_url(a) + "/library")
    assert "hearthnet ui" in text_of(driver, "main")
    assert not css(driver, "#corpora")
    for path in ("/api/live", "/api/corpora", "/api/mesh", "/api/events", "/api/chats"):
        assert fetch(driver, "GET", path)["status"] == 401, path
    live = driver.execute_async_script(
        """
        const done = arguments[0];
        const es = new EventSource('/api/live');
        es.onopen = () => { es.close(); done('open'); };
        es.onerror = () => {
          const s = es.readyState;
          es.close();
          done(s === EventSource.CLOSED ? 'refused' : 'retrying');
        };
        """
    )
    assert live == "refused"
    screenshot(driver, "07-signed-out")


@pytest.mark.usefixtures("papers")
def test_phone_width_and_keyboard_alone(mesh: LocalMesh, driver: Any) -> None:
    from selenium.webdriver.common.keys import Keys

    a = a_node(mesh)
    driver.set_window_size(360, 780)
    try:
        for page, ready in (
            ("ask", "#question"),
            ("library", "#corpora tbody tr"),
            ("mesh", "#nodes tbody tr"),
        ):
            driver.get(ui_url(a) + "/" + page)
            wait(driver, lambda d, sel=ready: css(d, sel), what=f"the {page} page")
            width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            wide = driver.execute_script(
                "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right"
                " > window.innerWidth + 1).slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)"
            )
            assert width[0] <= width[1], (page, width, wide)
            screenshot(driver, f"08-phone-{page}")
        driver.get(ui_url(a) + "/library")
        wait(driver, lambda d: css(d, "#corpora tbody tr"), what="the corpora")
        reached = []
        body = css(driver, "body")[0]
        body.send_keys(Keys.TAB)
        for _ in range(40):
            reached.append(
                driver.execute_script("const e = document.activeElement; return e.id || e.textContent.trim()")
            )
            if reached[-1] == "choose-files":
                break
            driver.switch_to.active_element.send_keys(Keys.TAB)
        assert "Skip to content" in reached and "Library" in reached and "refresh" in reached, reached
        assert reached[-1] == "choose-files", reached
        outline = driver.execute_script("return getComputedStyle(document.activeElement).outlineStyle")
        assert outline != "none"
        screenshot(driver, "08-phone-keyboard")
    finally:
        driver.set_window_size(1200, 900)


def confirm_dialog(driver: Any, accept: bool) -> str:
    wait(
        driver,
        lambda d: d.execute_script("return document.getElementById('confirm').open"),
        what="the dialog",
    )
    text = text_of(driver, "#confirm")
    css(driver, "#confirm-ok" if accept else "#confirm button[value=cancel]")[0].click()
    wait(
        driver, lambda d: not d.execute_script("return document.getElementById('confirm').open"), what="close"
    )
    return text


def level_of(driver: Any, node_id: str) -> str:
    return str(
        driver.execute_script(
            "const r = document.querySelector(`#nodes tr[data-node='${arguments[0]}']`);"
            "return r ? r.children[2].textContent : '';",
            node_id,
        )
    )


def test_the_owner_invites_promotes_demotes_and_revokes_with_a_confirmation(
    mesh: LocalMesh, driver: Any
) -> None:
    a, b = a_node(mesh), mesh.nodes["attic"]
    guest = mesh.add("guest")  # a new device: its id, not yet a member
    driver.get(ui_url(a) + "/mesh")
    wait(driver, lambda d: level_of(d, b.node_id) == "member", what="the attic as a member")
    css(driver, "#invite-node")[0].send_keys(guest.node_id)
    css(driver, "#invite-form button[type=submit]")[0].click()
    wait(
        driver, lambda d: css(d, "#invite-token")[0].get_attribute("value").startswith("hn1."), what="a token"
    )
    screenshot(driver, "10-invite")

    def press(label: str) -> None:
        # found and clicked in one step: the live feed may redraw the table between two
        pressed = driver.execute_script(
            "const row = document.querySelector(`#nodes tr[data-node='${arguments[0]}']`);"
            "const b = row && [...row.querySelectorAll('button')].find(x => x.textContent === arguments[1]);"
            "if (b) b.click(); return !!b;",
            b.node_id,
            label,
        )
        assert pressed, label

    press("Promote to trusted")
    assert "attic becomes trusted" in confirm_dialog(driver, accept=True)
    wait(driver, lambda d: level_of(d, b.node_id) == "trusted", what="the promotion to show")
    press("Demote to member")
    confirm_dialog(driver, accept=True)
    wait(driver, lambda d: level_of(d, b.node_id) == "member", what="the demotion to show")
    press("Revoke")
    assert "cannot be undone" in confirm_dialog(driver, accept=False)  # cancelled: nothing happens
    assert level_of(driver, b.node_id) == "member"
    press("Revoke")
    confirm_dialog(driver, accept=True)
    wait(driver, lambda d: level_of(d, b.node_id) == "revoked", what="the revocation to show")
    events = text_of(driver, "#events")
    assert (
        "set attic to trusted" in events and "demoted attic to member" in events and "revoked attic" in events
    )
    screenshot(driver, "10b-mesh-after-actions")


@pytest.mark.usefixtures("papers")
def test_node_restart_the_page_says_so_and_recovers(mesh: LocalMesh, driver: Any) -> None:
    a = a_node(mesh)
    url = ui_url(a)
    driver.get(url + "/library")
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="papers"]'), what="the corpora")
    wait(
        driver,
        lambda d: driver.execute_script("return document.getElementById('banner').hidden"),
        what="no banner",
    )
    a.stop()
    wait(driver, lambda d: "Lost contact" in text_of(d, "#banner"), timeout=30, what="the page to notice")
    screenshot(driver, "09-node-stopped")
    a.extra_env["HEARTHNET_UI_LISTEN"] = url.removeprefix("http://")  # the port the page knows
    a.start()
    a.wait_ready()
    wait(driver, lambda d: "restarted" in text_of(d, "#banner"), timeout=60, what="the page to reconnect")
    wait(driver, lambda d: css(d, '#corpora tr[data-corpus="papers"]'), what="the corpora again")
    assert "owner · anchor" in text_of(driver, ".who")
    assert fetch(driver, "GET", "/api/corpora")["status"] == 200  # the session outlived the restart
    screenshot(driver, "09-node-restarted")
