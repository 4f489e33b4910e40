"""The Roles page in real Streamlit (AppTest): the grid, table and CSV equal the library's role scores."""

import numpy as np
import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import _calculate_file_id

import attnviz
from attnviz.analysis.roles import CAUSAL_NOTE, ROLES, probe_trace, role_scores, role_table, strongest
from helpers import decode, ok, open_page
from test_analysis_pages import charts, select

TEXT = "The cat sat on the mat. The cat sat on the mat again, and the dog watched."


def grid(at):
    heat, points, *legend = charts(at)["role_grid"]["data"]
    return heat, points


def legend(at) -> list[str]:
    """The role names the grid's legend lists, in order."""
    return [t["name"] for t in charts(at)["role_grid"]["data"][2:]]


@pytest.fixture(scope="module")
def minilm():
    return attnviz.load("builtin:minilm")


def test_grid_table_and_csv_on_the_text(minilm):
    at = ok(open_page("pages/7_Roles.py", text=TEXT))
    scores = role_scores(minilm.trace(TEXT, max_tokens=512))
    best, names = strongest(scores)
    heat, points = grid(at)
    np.testing.assert_array_equal(decode(heat["z"]), best)
    assert "induction" not in names and legend(at) == [ROLES[r].label for r in names]
    top = np.max([scores[r] for r in names], 0)
    assert heat["text"] == [[f"{v:.2f}".lstrip("0") for v in row] for row in top]
    # Hover lists every score (customdata after layer and head), and names the strongest role.
    custom = decode(points["customdata"])
    np.testing.assert_allclose(custom[:, 2:], np.stack([scores[r].ravel() for r in names], 1), atol=1e-12)
    for k, r in enumerate(names):
        assert f"{ROLES[r].label} %{{customdata[{k + 2}]:.3f}}" in points["hovertemplate"]
    assert points["text"][0] == ROLES[names[best[0, 0]]].label
    assert any(CAUSAL_NOTE in c.value for c in at.caption)
    shown = at.dataframe[0].value
    want = role_table(scores, role_scores(probe_trace(minilm)))
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), want, check_exact=False, atol=1e-9)
    # The download's URL names the hash of its bytes: it serves exactly this table as CSV.
    url = at.get("download_button")[0].proto.url
    assert url.endswith(_calculate_file_id(want.to_csv(index=False).encode(), "text/csv",
                                           "attnviz_builtin-minilm_roles.csv") + ".csv")


def test_probe_scores_and_a_click_opens_the_head(minilm):
    at = ok(open_page("pages/7_Roles.py", text=TEXT, roles_on="the standard probe"))
    probe = role_scores(probe_trace(minilm))
    heat, _ = grid(at)
    np.testing.assert_array_equal(decode(heat["z"]), strongest(probe)[0])
    assert "standard probe" in charts(at)["role_grid"]["layout"]["title"]["text"]
    at = select(at, "role_grid", {"x": 7, "y": 2, "point_index": 2 * 12 + 7, "curve_number": 1})
    assert at.session_state["layer"] == 2 and at.session_state["head"] == 7


def test_a_causal_model_gets_induction(tiny_model):
    folder = str(tiny_model("gpt2"))
    at = ok(open_page("pages/7_Roles.py", model=folder, text=TEXT, roles_on="the standard probe"))
    heat, points = grid(at)
    assert ROLES["induction"].label in legend(at)
    assert not any(CAUSAL_NOTE in c.value for c in at.caption)
    assert "induction (probe)" in at.dataframe[0].value.columns
