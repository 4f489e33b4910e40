"""Train the seed's models on a generated task, or the language model on generated stories, and watch them learn:
the loss and accuracy (or the induction and previous-token scores) and the attention change."""

import streamlit as st

from attnviz.analysis.roles import PROBE
from attnviz.figures.attention import attention_heatmap
from attnviz.figures.train import lm_curves, training_curves
from attnviz.training.lm import LMConfig, PROMPT, train_lm
from attnviz.settings import max_train_steps
from attnviz.training.tasks import TASKS
from attnviz.core.tokens import labels
from attnviz.training.loop import TrainConfig, train
from attnviz.ui.frame import SESSION, frame, register_session_model, session_models
from attnviz.ui.jobs import slot
from attnviz.ui.progress import Bar, again
from attnviz.ui.escape import code, plain

TITLES = {
    "classifier": "Sentiment classifier: a cue word, maybe negated, decides positive or negative",
    "translator": "Date translator: “Friday, the 5th of March 2021” → 2021-03-05",
    "lm": "Language model: generated stories with repeated spans; watch induction heads form",
}
SIZES = {  # the seed's architecture (post-norm, sinusoidal positions, ReLU) at small widths
    "tiny": dict(d_model=32, n_heads=2, n_layers=1, d_ff=64),
    "small": dict(d_model=64, n_heads=4, n_layers=2, d_ff=128),
    "medium": dict(d_model=128, n_heads=4, n_layers=3, d_ff=256),
}
LM_SIZES = {  # pre-norm, learned positions; induction needs two layers
    "small": dict(d_model=32, n_heads=2, n_layers=2, d_ff=64),
    "builtin:lm's": dict(d_model=64, n_heads=2, n_layers=2, d_ff=64),
}
LM_ABOUT = (
    "Every few steps the best head's **induction** and **previous-token** scores are measured on the standard "
    f"probe ({PROBE}). Watch for the jump in the induction curve: the phase change in which induction heads form "
    "(Olsson et al. 2022)."
)


def session_key(task: str) -> str:
    return f"{SESSION}{task}"


def use_model(key: str) -> None:
    st.session_state["model"] = key


def live(curves, on_eval=None):
    """A progress bar (a Stop ends training at the next report) and curves redrawn as training reports;
    ``on_eval(progress)`` below them at evaluations."""
    bar, chart, below = Bar("Training…", "training"), st.empty(), st.empty()
    rows = []

    def on_step(p):
        rows.append(p.row())
        bar(p.step / p.steps, f"step {p.step} / {p.steps} · loss {p.loss:.4f}")
        chart.plotly_chart(curves(rows), key=f"train_curve_{p.step}")
        if p.model is not None and on_eval is not None:
            with below.container():
                on_eval(p)

    return on_step


def show_preview(model, text: str, chart_key: str) -> None:
    """The model's answer for ``text`` and the attention that produced it (last layer, mean of heads)."""
    try:
        trace = model.trace(text)
    except ValueError as e:
        st.error(plain(e))
        return
    if trace.kind == "encoder-decoder":
        st.markdown(f"Greedy translation: {code(model.translate(text))}")
        attn, rows, cols = trace.head(trace.decoder.n_layers - 1, None, "cross"), trace.decoder.tokens, trace.encoder.tokens
        title = "Cross-attention, last layer, mean of heads: row i is the query that writes the next token."
    else:
        probs = model.predict(text)
        st.dataframe({"label": list(probs), "probability": list(probs.values())}, hide_index=True,
                     column_config={"probability": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0)})
        attn, rows, cols = trace.head(trace.n_layers - 1, None), trace.tokens, trace.tokens
        title = "Self-attention, last layer, mean of heads."
    st.caption(title)
    st.plotly_chart(attention_heatmap(attn, labels(rows), labels(cols)), key=chart_key)


def run_seed_task(task: str, size: str, steps: int, preview: str):
    """Train the seed's model on ``task`` with live curves and the preview text."""
    config = TrainConfig(steps=steps, eval_every=max(1, steps // 8), eval_size=200,
                         log_every=max(1, steps // 100), **SIZES[size])

    def on_eval(p):
        st.subheader(f"Probe at step {p.step} · held-out accuracy {p.scores['eval_accuracy']:.1%}")
        show_preview(p.model, preview, f"train_probe_chart_{p.step}")

    return train(task, config, live(training_curves, on_eval), key=session_key(task))


def run_lm(size: str, steps: int):
    """Train a language model with live loss, induction and previous-token curves."""
    config = LMConfig(steps=steps, eval_every=max(1, steps // 20), log_every=max(1, steps // 100), **LM_SIZES[size])
    return train_lm(config, live(lm_curves), key=session_key("lm"))


def show_seed_result(key: str, done: dict, preview: str) -> None:
    st.success(f"Trained **{key}** ({done['size']}) in {done['seconds']:.0f} s: "
               f"{done['eval_accuracy']:.1%} on held-out examples.")
    st.button(f"Use {key} on every page", key="train_use", on_click=use_model, args=(key,))
    st.plotly_chart(training_curves(done["history"]), key="train_curve")
    st.subheader("Try it")
    show_preview(session_models()[key], preview, "train_probe_chart")


def show_lm_result(key: str, done: dict, preview: str) -> None:
    st.success(f"Trained **{key}** ({done['size']}) in {done['seconds']:.0f} s: best induction score "
               f"{done['induction']:.2f}, best previous-token score {done['previous']:.2f} on the probe.")
    st.button(f"Use {key} on every page", key="train_use", on_click=use_model, args=(key,))
    st.plotly_chart(lm_curves(done["history"]), key="train_curve")
    st.markdown(f"Try it on the **Generate** page with a prompt like {code(preview)}.")


def size_picker(column, sizes: dict, default: str, key: str) -> str:
    return column.select_slider("Size", list(sizes), default, key=key, help=" · ".join(
        f"{k}: {v['n_layers']} layers × {v['n_heads']} heads, width {v['d_model']}" for k, v in sizes.items()))


frame("Train")
st.title("Train")
st.markdown(
    "Train the seed's transformer, at a small size, on a task attnviz generates, or attnviz's decoder-only "
    "language model on generated stories, and watch it learn. "
    "The trained model stays available in the sidebar's model picker for this session."
)
c1, c2, c3 = st.columns(3)
task = c1.radio("Task", list(TITLES), format_func=lambda t: TITLES[t].split(":")[0], key="train_task")
size = (size_picker(c2, LM_SIZES, "builtin:lm's", "train_lm_size") if task == "lm"
        else size_picker(c2, SIZES, "small", "train_size"))
steps = c3.number_input("Steps", 10, 5000, 400, step=50, key="train_steps",
                        help="Batches of 64 fresh examples (the language model: 16 generated documents of 112 "
                             "tokens); small models need a few hundred.")
st.caption(TITLES[task])
if task == "lm":
    st.markdown(LM_ABOUT)
    preview = PROMPT
else:
    preview = st.text_input("Probe example", TASKS[task].preview, key=f"train_probe_{task}",
                          help="Shown after each evaluation while training, and with the trained model afterwards.")

used = st.session_state.get("train_steps_used", 0)
left = max_train_steps() - used
if left < 10:
    st.info(f"This session has trained its {max_train_steps():,} steps, the most this server gives one visitor "
            "(an operator can raise it with ATTNVIZ_MAX_TRAIN_STEPS).")
elif steps > left:
    st.caption(f"This session may train {left:,} more steps: a run stops there.")

if st.button("Train", type="primary", key="train_go", disabled=left < 10) or (again("training") and left >= 10):
    steps = min(int(steps), left)
    with slot("This training"):
        st.session_state["train_steps_used"] = used + steps  # counted when it starts: a stopped run is not refunded
        result = run_lm(size, steps) if task == "lm" else run_seed_task(task, size, steps, preview)
    register_session_model(session_key(task), result.model)
    st.session_state.setdefault("train_results", {})[task] = dict(size=size, history=result.history,
                                                                  seconds=result.seconds, **result.scores)
    st.rerun()  # so the model picker, drawn before training, lists the new model

done = st.session_state.get("train_results", {}).get(task)
if done and session_key(task) in session_models():
    (show_lm_result if task == "lm" else show_seed_result)(session_key(task), done, preview)
