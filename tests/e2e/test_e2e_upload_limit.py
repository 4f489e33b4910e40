"""The sidebar's upload limit in a real browser: Streamlit 1.67's uploader counts a widget's max_upload_size in MB
of 10^6 bytes (1024² only on Windows), so the limit the app states, 2 MB (2,000,000 bytes), is the one enforced: a
byte more (or the probe's 1.91 MiB) is refused in the browser, 2,000,000 bytes are read (issue 58 item 7)."""

from playwright.sync_api import expect

from attnviz.ui.frame import MAX_UPLOAD_BYTES


def test_the_browser_enforces_the_limit_the_sidebar_states(page, app_url):
    page.goto(app_url)
    chooser = page.locator(".st-key-upload input[type=file]")
    expect(page.get_by_role("textbox", name="Text", exact=True)).to_be_visible(timeout=90_000)
    uploader = page.locator(".st-key-upload")
    for size in (2_002_780, MAX_UPLOAD_BYTES + 1):
        chooser.set_input_files(files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"a" * size}])
        expect(uploader).to_contain_text("File must be 2.0MB or smaller.", timeout=30_000)
        expect(page.get_by_text("Showing the uploaded document")).to_have_count(0)
        uploader.get_by_role("button", name="Remove").first.click()
    chooser.set_input_files(files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"a" * MAX_UPLOAD_BYTES}])
    expect(page.get_by_text("Showing the uploaded document: 2,000,000 characters")).to_be_visible(timeout=120_000)
    expect(uploader).not_to_contain_text("File must be")
