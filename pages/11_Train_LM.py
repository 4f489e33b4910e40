"""Train a tiny language model and watch its induction heads form: the loss and the probe's scores over steps."""

import streamlit as st

from attnviz.analysis.roles import PROBE
from attnviz.figures.train import lm_curves
from attnviz.lm import LMConfig, PROBE as PROMPT, train_lm
from attnviz.ui.frame import frame, register_session_model, session_models

KEY = "session:lm"
SIZES = {  # pre-norm, sinusoidal positions; induction needs two layers
    "small": dict(d_model=32, n_heads=2, n_layers=2, d_ff=64),
    "builtin:lm's": dict(d_model=64, n_heads=4, n_layers=2, d_ff=64),
}


def use_model() -> None:
    st.session_state["model"] = KEY


frame("Train LM")
st.title("Train a language model")
st.markdown(
    "Train attnviz's decoder-only model on generated stories whose sentences come back word for word, and on "
    "runs of random words repeated. Every few steps the best head's **induction** and **previous-token** "
    f"scores are measured on the standard probe ({PROBE}). Watch for the jump in the induction curve: the phase "
    "change in which induction heads form (Olsson et al. 2022). The trained model stays in the sidebar's model "
    "picker for this session, as builtin:lm's shipped checkpoint is on every page."
)
c1, c2 = st.columns(2)
size = c1.select_slider("Size", list(SIZES), "builtin:lm's", key="lm_size",
                        help=" · ".join(f"{k}: {v['n_layers']} layers × {v['n_heads']} heads, width {v['d_model']}"
                                        for k, v in SIZES.items()))
steps = c2.number_input("Steps", 10, 5000, 600, step=50, key="lm_steps",
                        help="Batches of 16 generated documents of 112 tokens.")

if st.button("Train", type="primary", key="lm_go"):
    config = LMConfig(steps=int(steps), eval_every=max(1, int(steps) // 20), log_every=max(1, int(steps) // 100),
                      **SIZES[size])
    bar, chart = st.progress(0.0, "starting…"), st.empty()
    rows = []

    def on_step(p):
        rows.append(p.row())
        bar.progress(p.step / p.steps, f"step {p.step} / {p.steps} · loss {p.loss:.4f}")
        if p.induction is not None:
            chart.plotly_chart(lm_curves(rows), key=f"lm_curve_{p.step}")

    result = train_lm(config, on_step, key=KEY)
    register_session_model(KEY, result.model)
    st.session_state["lm_result"] = dict(size=size, history=result.history, induction=result.induction,
                                         previous=result.previous, seconds=result.seconds)
    st.rerun()  # so the model picker, drawn before training, lists the new model

done = st.session_state.get("lm_result")
if done and KEY in session_models():
    st.success(f"Trained **{KEY}** ({done['size']}) in {done['seconds']:.0f} s: best induction score "
               f"{done['induction']:.2f}, best previous-token score {done['previous']:.2f} on the probe.")
    st.button(f"Use {KEY} on every page", key="lm_use", on_click=use_model)
    st.plotly_chart(lm_curves(done["history"]), key="lm_curve")
    st.markdown(f"Try it on the Generate page with a prompt like `{PROMPT}`.")
