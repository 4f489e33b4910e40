"""What a model makes of the text: a note when it cannot read most of it (with texts it can), and its
own output — a classifier's class probabilities, a translator's translation."""

from __future__ import annotations

import streamlit as st

from attnviz.data.samples import TOO_MANY_UNKNOWN, samples_for, unknown_share


def _use(text: str) -> None:
    st.session_state["text"] = text


def unknown_note(trace, key: str) -> None:
    """A warning, with the model's sample texts as buttons, when over a fifth of the tokens are unknown."""
    stack = trace.encoder if trace.kind == "encoder-decoder" else trace
    unknown, total = unknown_share(stack.tokens, stack.special)
    if not total or unknown / total <= TOO_MANY_UNKNOWN:
        return
    with st.container(border=True, key="unknown_note"):
        st.warning(f"{unknown} of {total} tokens are unknown to this model ([UNK]): it only knows the words it "
                   "was trained on, so there is little to see. Try one of its own texts:", icon=":material/text_fields:")
        samples = samples_for(key)
        for column, (name, text) in zip(st.columns(len(samples)), samples.items()):
            column.button(name, key=f"unknown_sample_{name}", on_click=_use, args=(text,), help=text,
                          use_container_width=True)


def model_output(model, text: str) -> None:
    """The classifier's prediction or the translator's output for ``text``, for models that have one."""
    if model.can("predict"):
        probs = model.predict(text)
        best = max(probs, key=probs.get)
        st.markdown(f"**Prediction: {best}** ({probs[best]:.1%})")
        st.dataframe({"class": list(probs), "probability": list(probs.values())}, hide_index=True,
                     key="prediction", column_config={
                         "probability": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.3f")})
    elif model.can("translate"):
        st.markdown("**Translation:**")
        st.code(model.translate(text), language=None)  # a code block shows the model's text as it is
