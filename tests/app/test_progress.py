"""Every long step of a page reaches ``jobs.checkpoint`` through the one progress helper (ui/progress.py): a Stop
raised there mid-step, as Streamlit raises it on a rerun or a closed tab (StopException), ends the step, and the
page says so beside the frozen bar, with "Run it again". Real pages in real Streamlit (AppTest)."""

import pytest
from streamlit.testing.v1 import AppTest

from helpers import ok, open_page

TEXT = "The film was not good today"
CLEAN = "the cat sat on the mat and the cat"
CORRUPTED = "the dog sat on the mat and the cat"


def stopped(at: AppTest) -> str:
    (said,) = [m.value for m in at.markdown if "Stopped about" in m.value]
    return said


def test_the_bar_checks_every_step_and_says_where_a_stop_left_it(checkpoints, monkeypatch):
    def script():
        from attnviz.ui.progress import Bar

        bar = Bar("Counting sheep…", "sheep")
        for k in range(1, 11):
            bar(k / 10, f"sheep {k} of 10")
        bar.done()
        import streamlit as st
        st.write("all sheep counted")

    at = ok(AppTest.from_function(script).run())
    assert checkpoints["n"] == 10 and not at.get("progress")  # done: the bar and the message go
    assert [m.value for m in at.markdown if "all sheep" in m.value]

    from attnviz.ui import progress

    for every, shown in [(progress.BAR_EVERY_S, 1), (0.0, 4)]:  # steps faster than BAR_EVERY_S: the first draw stays
        monkeypatch.setattr(progress, "BAR_EVERY_S", every)
        checkpoints.update(n=0, stop=4)
        at = AppTest.from_function(script).run()
        assert not at.exception and checkpoints["n"] == 4
        assert not [m.value for m in at.markdown if "all sheep" in m.value]  # stopped at the 4th step
        (bar,) = at.get("progress")
        assert bar.proto.text == f"Counting sheep · sheep {shown} of 10" and bar.proto.value == 10 * shown
        said = stopped(at)  # where the bar last moved to
        assert f"at {10 * shown}% of “Counting sheep”" in said and "run it again to finish" in said, said
        assert at.button(key="run_again_sheep").label == "Run it again"


# Each page's long step: the page, its URL, the button that starts it (None: it runs as the page opens), and the
# session-state key its result would be kept under (None: nothing kept).
STEPS = {
    "ablation": ("pages/4_Analysis.py", dict(model="builtin:classifier", text=TEXT), "ablate"),
    "training": ("pages/5_Train.py", dict(model="builtin:classifier"), "train_go"),
    "generation": ("pages/8_Generate.py", dict(model="builtin:lm", text=CLEAN), None),
    "patching": ("pages/11_Interventions.py", dict(model="builtin:lm", text=CLEAN, corrupted=CORRUPTED), "patch"),
    "faithfulness": ("pages/12_Faithfulness.py", dict(model="builtin:classifier", text=TEXT), "faith_run"),
    "head atlas": ("pages/7_Roles.py", dict(text="The cat sat on the mat.", atlas_tokens="300", atlas_k="2",
                                            atlas_on="true"), None),  # model: a tiny long-context Llama's folder
}


@pytest.fixture(scope="module")
def long_llama_folder(tmp_path_factory):
    from tiny_models import long_llama

    return long_llama(tmp_path_factory.mktemp("progress-llama")).removeprefix("hf:")


@pytest.mark.parametrize("step", list(STEPS))
def test_a_stop_mid_step_ends_each_pages_long_step(checkpoints, step, request):
    page, query, button = STEPS[step]
    if "model" not in query:
        query = dict(query, model=request.getfixturevalue("long_llama_folder"))
    if button is None:
        checkpoints.update(n=0, stop=2)
        at = open_page(page, timeout=300, **query)
    else:
        at = ok(open_page(page, timeout=300, **query))
        assert not stopped_any(at)
        checkpoints.update(n=0, stop=2)
        at = at.button(key=button).click().run()
    assert not at.exception and checkpoints["n"] == 2  # the second step's checkpoint stopped it
    assert "a page needs the whole of it" in stopped(at)
    (again,) = [b for b in at.button if b.key.startswith("run_again_")]
    assert again.label == "Run it again"
    checkpoints.update(n=0, stop=None)
    if "model" in STEPS[step][1]:  # "Run it again" runs the step again, to its end
        at = ok(again.click().run())
    else:  # a fresh page: a model folder typed in the URL does not survive an AppTest rerun
        at = ok(open_page(page, timeout=300, **query))
    assert checkpoints["n"] > 2 and not stopped_any(at)


def stopped_any(at: AppTest) -> bool:
    return any("Stopped about" in m.value for m in at.markdown)



def test_a_stop_mid_corpus_run_keeps_its_shards_and_run_it_again_resumes(checkpoints, tmp_path, monkeypatch):
    """The Corpus page's run draws the one bar before every batch (every_step): a Stop there says the finished shards
    are kept, and "Run it again" starts the run, which goes on from them to the library's numbers. 300 demo texts:
    shard 0 holds 256 (16 batches of 16), shard 1 the other 44."""
    import numpy as np

    from attnviz import corpus as cp
    from attnviz.data import CORPUS

    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    at = ok(open_page("pages/10_Corpus.py", timeout=300))
    at.number_input(key="corpus_limit").set_value(300)
    # checkpoints: the bar as the run starts, before each of shard 0's 16 batches, as shard 0 is done, and then
    # before shard 1's first batch, where this Stop comes
    checkpoints.update(n=0, stop=19)
    at = at.button(key="corpus_run").click().run()
    assert not at.exception and checkpoints["n"] == 19
    said = stopped(at)
    assert "of “Running the corpus”: its finished shards are kept, and Run goes on from the first one missing." in said
    (bar,) = at.get("progress")
    assert bar.proto.text.startswith("Running the corpus · 256 of 300 texts"), bar.proto.text
    assert sorted(p.name for p in (tmp_path / "work").glob("*.shards/shard-*.npz")) == ["shard-00000.npz"]
    checkpoints.update(n=0, stop=None)
    at = ok(at.button(key="run_again_corpus").click().run())
    assert checkpoints["n"] == 1 + 3 + 1  # resumed: the start, shard 1's three batches, its end
    table = at.dataframe[0].value
    assert (table["n_texts"] == 300).all() and not stopped_any(at)
    expected = cp.run("builtin:minilm", CORPUS, tmp_path / "lib.parquet", limit=300)
    np.testing.assert_allclose(table["entropy_mean"], expected.table()["entropy_mean"], atol=2e-5)
