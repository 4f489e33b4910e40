"""One progress bar and stop point for every long step of a page (a long forward, generation, training, head
ablation, patching, attribution passes, the head atlas).

Every step calls the bar, and the bar calls ``jobs.checkpoint()``: a rerun of the same session or a closed tab
stops the work at the next step, whichever page runs it. The bar itself shows only once the work has taken
BAR_AFTER_S and moves at most every BAR_EVERY_S: each move re-renders the page, and a browser on the server's
machine (a laptop demo, the benchmarks) draws every change on the CPU the work needs.

Once Streamlit stops a script nothing more can be drawn, so what a Stop leaves (what stopped, how far in, what is
kept, and "Run it again") is drawn beside the bar and kept current; BAR_CSS shows it, and hides the frozen bar, only
once the app no longer runs.
"""

from __future__ import annotations

import time

import streamlit as st

from attnviz.ui import jobs

BAR_AFTER_S = 0.3  # a bar shows once the work has run this long (a bar that comes and goes delays the page)
BAR_EVERY_S = 2.5  # and moves at most this often
BAR_KEY = "progress_bar"  # the key prefix of the containers the bars are drawn in
STOPPED_KEY = "stopped"  # the key prefix of what a Stop leaves in their place
_RUNNING = 'body:has([data-testid="stStatusWidgetRunningIcon"])'  # while the app runs a script
BAR_CSS = (
    # The bar sits in the header, out of the page's flow: in the flow, its coming and going pushed the whole page
    # down and back (every chart laid out and painted again), and a reader scrolled down could not see it. It stays
    # clear of the sidebar on the left and of Streamlit's status and menu on the right; up to 768 px the sidebar
    # starts collapsed, its button where the bar would start.
    f'[class*="st-key-{BAR_KEY}"] {{ position: fixed; top: 0.75rem; z-index: 1000000;'
    " width: clamp(8rem, calc(100vw - 30rem), 36rem); }"
    f'@media (max-width: 768px) {{ [class*="st-key-{BAR_KEY}"] {{ margin-left: 3rem;'
    " width: clamp(8rem, calc(100vw - 14rem), 36rem); } }"
    # A Stop ends the script where it is: the bar froze over an empty page. Its message shows only once the app no
    # longer runs, and the frozen bar goes.
    f'{_RUNNING} [class*="st-key-{STOPPED_KEY}_"] {{ display: none; }}'
    f'body:not(:has([data-testid="stStatusWidgetRunningIcon"])) [class*="st-key-{BAR_KEY}"] {{ display: none; }}'
)


class Bar:
    """``bar(fraction, detail=None)`` at every step of the work: a checkpoint, and a bar saying ``title`` (with the
    step's ``detail``, such as "head 3 of 12") drawn once the work has taken BAR_AFTER_S, moved at most every
    BAR_EVERY_S, in a container keyed BAR_KEY + ``name`` (two bars in one run need two names; ``again(name)`` tells
    a page that its "Run it again" was clicked); ``done()`` removes it.

    ``layers``: the work reads that many layers in turn, and a Stop keeps those read whole (the long forward,
    ui/long.py): the message says how many, updated as each is done (a markdown element, at most once a layer); 0:
    a Stop keeps nothing. ``resumes``: the work keeps what it finished on its own (a corpus job's shards), and a
    Stop's message says this instead. ``every_step``: drawn at every step from the first, for work whose steps take
    seconds each (a corpus job's batches, each of which also redraws the results so far)."""

    def __init__(self, title: str, name: str = "step", layers: int = 0, resumes: str | None = None,
                 every_step: bool = False):
        self.title, self.text, self.key, self.name = title, title, f"{BAR_KEY}_{name}", name
        self.bar = self.note = None
        self.layers, self.kept, self.resumes = layers, -1, resumes
        self.every = 0.0 if every_step else BAR_EVERY_S
        self.start = time.perf_counter()
        self.last = self.start - self.every + (0.0 if every_step else BAR_AFTER_S)  # the first draw's time

    def __call__(self, fraction: float, detail: str | None = None) -> None:
        if detail is not None:
            self.text = f"{self.title.rstrip('…')} · {detail}"
        self._draw(min(max(fraction, 0.0), 1.0))
        jobs.checkpoint()  # every step, once the message says what a Stop here keeps: a closed tab or a rerun stops
        # the work here

    def _draw(self, fraction: float) -> None:
        now = time.perf_counter()
        kept = int(fraction * self.layers + 1e-6)  # the layers read whole: what a Stop now keeps
        if now - self.last >= self.every:
            self.last = now
            if self.bar is None:
                self.note = st.empty()
                with self.note.container(key=f"{STOPPED_KEY}_{self.name}"):
                    st.markdown(f"<style>{BAR_CSS}</style>", unsafe_allow_html=True)  # our own constant
                    self.said = st.empty()
                    st.button("Run it again", key=f"run_again_{self.name}", icon=":material/replay:", type="primary")
                with st.container(key=self.key):
                    self.bar = st.progress(fraction, text=self.text)
            else:
                self.bar.progress(fraction, text=self.text)
        elif self.bar is None or kept == self.kept:
            return
        # markdown, not an alert: it is on the page (hidden) through every run, and says nothing wrong until a Stop
        title = self.title.rstrip("…")
        why = self.resumes or (f"a page needs the whole of it, so nothing below was drawn. {self._kept_words(kept)}"
                               "The text, the model and the settings are as they were: run it again to finish.")
        self.said.markdown(f":orange[:material/stop_circle:] Stopped about {now - self.start:.0f} s in, at "
                           f"{fraction:.0%} of “{title}”: {why}")
        self.kept = kept  # once on the page (a Stop can come in the call that draws it: Streamlit checks there)

    def keeps(self, layers: list) -> list:
        """Of ``layers`` read whole when the work stopped, those the page says are kept (all of them while no
        message is on the page)."""
        return layers if self.kept < 0 else layers[:self.kept]

    def _kept_words(self, kept: int) -> str:
        if not self.layers:
            return ""
        if not kept:
            return "No layer was read whole yet, so a run starts over. "
        rest = "its last layer" if self.layers - kept == 1 else f"the other {self.layers - kept}"
        return (f"The heads of the first {kept} of its {self.layers} layers were read and are kept: running it again "
                f"reads only {rest} (the model itself runs over the text again). ")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.empty()
            self.note.empty()


def again(name: str) -> bool:
    """Whether this run comes from the "Run it again" of the bar ``name``: a page whose step starts on its own button
    starts it then too."""
    return bool(st.session_state.get(f"run_again_{name}"))
