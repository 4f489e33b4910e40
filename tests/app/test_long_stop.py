"""A Stop half-way through the Attention page's long forward, in real Streamlit (AppTest): the Stop is raised in
``jobs.checkpoint`` as Streamlit raises it (StopException) at a tile mid-forward. The page says how many layers'
heads it keeps, "Run it again" reads only the others, and the survey it shows is the one an uninterrupted run
reads (within 1e-6)."""

import re

import numpy as np
import pytest

from helpers import ok, open_page
from test_long_analysis import assert_same_survey

TEXT = " ".join(np.random.default_rng(57).choice("the of and river stone cloud light paper window".split(), 1200))
OVERVIEW = 16


@pytest.fixture
def checkpoints(checkpoints):
    """conftest's Stop at the ``stop``-th checkpoint (one a tile of the long forward), with the long traces and what
    a Stop kept cleared around the test."""
    from attnviz.ui import long

    long._LONG.clear()
    long._STOPPED.clear()
    yield checkpoints
    long._LONG.clear()
    long._STOPPED.clear()


def test_stop_keeps_the_layers_read_and_run_it_again_reads_only_the_rest(checkpoints):
    from attnviz.ui import long

    ok(open_page("pages/1_Attention.py", timeout=600, model="builtin:seed", text=TEXT))
    whole, L = checkpoints["n"], long.resolve("builtin:seed").n_layers
    (entry,) = long._LONG.values()
    uninterrupted = entry.survey.reducer.result(OVERVIEW)
    long._LONG.clear()
    del entry

    checkpoints.update(n=0, stop=whole // 2)
    at = open_page("pages/1_Attention.py", timeout=600, model="builtin:seed", text=TEXT)
    assert not at.exception and not at.get("plotly_chart")  # stopped: nothing below was drawn
    (said,) = [m.value for m in at.markdown if "Stopped about" in m.value]
    kept = int(re.search(rf"the first (\d) of its {L} layers were read and are kept", said).group(1))
    assert 1 <= kept < L and "running it again reads only" in said, said
    (stopped,) = long._STOPPED.values()
    assert len(stopped.layers) == kept  # what the page says is what is kept

    checkpoints.update(n=0, stop=None)
    ok(at.button(key="run_again_forward").click().run())
    assert at.get("plotly_chart") and not long._STOPPED
    assert checkpoints["n"] <= whole * (L - kept) / L + 2  # only the layers not kept were read
    (entry,) = long._LONG.values()
    assert entry.survey.reducer.layers[:kept] == stopped.layers
    assert_same_survey(entry.survey.reducer.result(OVERVIEW), uninterrupted, rtol=1e-6)
