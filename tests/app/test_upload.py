"""The shared frame's upload (the sidebar, under the text box): any page takes a .txt or .md document of up to 2 MB
in place of the text box's text, and says so; a file too big or not UTF-8 gets a plain message and the page shows
the text box's text (real Streamlit, AppTest)."""

import attnviz
from attnviz.ui.frame import MAX_UPLOAD_BYTES
from helpers import chart_specs, ok, open_page

BOX = "The text box's own sentence."
DOC = "A quiet river passes the old mill at dawn. " * 20  # ~180 tokens: the Attention page still cell by cell


def upload(page: str, name: str, data: bytes, **query):
    at = open_page(page, text=BOX, **query)
    at.sidebar.get("file_uploader")[0]  # in the sidebar, on every page
    at.file_uploader(key="upload").set_value((name, data, "text/plain")).run()
    return at


def status(at) -> str:
    (line,) = [c.value for c in at.caption if c.value.startswith("**builtin:")]
    return line


def test_any_page_traces_an_uploaded_document_and_says_so():
    for page in ("app.py", "pages/1_Attention.py", "pages/3_Norms.py"):
        at = ok(upload(page, "notes.md", DOC.encode()))
        assert any(c.value.startswith(f"Showing the uploaded document: {len(DOC):,} characters.") for c in at.caption)
        assert f"· {attnviz.trace(DOC).n_tokens} tokens" in status(at), (page, status(at))
        assert at.text_area(key="text").value == BOX  # the box (and the link) keep their own text


def test_a_long_upload_opens_the_attention_pages_long_view():
    doc = "The river stone and the cloud light meet the paper window. " * 40  # ~480 tokens of builtin:seed
    at = ok(upload("pages/1_Attention.py", "long.txt", doc.encode(), model="builtin:seed"))
    assert f"· {attnviz.load('builtin:seed').trace(doc).n_tokens} tokens" in status(at)
    assert any(c.proto.id.endswith("long_window") for c in at.get("plotly_chart")), [s["layout"].get("title") for s in chart_specs(at)]


def test_a_file_that_is_not_utf8_or_too_big_is_refused_in_plain_words():
    at = upload("app.py", "latin.txt", "café".encode("latin-1"))
    assert not at.exception
    # in the main area, where the user looks, not at the bottom of the sidebar
    assert [e.value for e in at.main.error] == ["'latin.txt' is not UTF-8 text (a binary file?). The text box's text "
                                                "is shown instead."] and not at.sidebar.error
    assert f"· {attnviz.trace(BOX).n_tokens} tokens" in status(at)
    at = upload("app.py", "big.txt", b"a " * (MAX_UPLOAD_BYTES // 2 + 1))
    assert not at.exception
    assert [e.value for e in at.main.error] == ["'big.txt' is 2,000,002 bytes, over the 2 MB (2,000,000 bytes) this "
                                                "page takes. The text box's text is shown instead."]
    assert f"· {attnviz.trace(BOX).n_tokens} tokens" in status(at)
