"""Head roles: every head named by what it does, on the text and on the standard repeated-token probe."""

import streamlit as st

from attnviz.analysis.roles import CAUSAL_NOTE, PROBE, ROLES, probe_trace, role_scores, role_table
from attnviz.export import file_stem
from attnviz.figures.roles import role_grid
from attnviz.ui.derived import derived
from attnviz.ui.frame import frame, plain
from attnviz.ui.heads import head_chart
from attnviz.ui.atlas import atlas_section

f = frame("Roles")
st.title("Head roles")
st.markdown(
    "Each head gets a score per role: the weight it puts where the role says, above a uniform head's and scaled "
    "so that 1 means all of it and 0 means no more than chance. The grid colours each head by its strongest "
    "role; hover for every score, click a head to open it on the Attention page."
)


def kept(name: str, owner, compute):
    """``compute()`` for ``owner`` (a trace or a model), from the views all sessions share: a session keeps no
    trace of its own."""
    return derived(owner, ("roles", name), compute)


trace, stack = f.trace, None
if trace.kind == "encoder-decoder":
    stack = st.radio("Stack", ["encoder", "decoder"], key="roles_stack", bind="query-params", horizontal=True)
    st.caption("Roles are defined on self-attention; cross-attention is left out.")
causal = trace.stack(stack).causal
text_scores = kept(f"text:{stack}", trace, lambda: role_scores(trace, stack))

probe_scores, probe_note = None, ""
if trace.kind == "encoder-decoder":
    probe_note = "The probe runs on encoders and causal language models; this model's scores are on the text only."
elif not f.model.can("token_ids"):
    probe_note = "This model cannot be run on token ids, so it has scores on the text only."
else:
    try:
        probe_scores = kept("probe", f.model, lambda: role_scores(probe_trace(f.model)))
    except ValueError as e:
        probe_note = f"The probe could not run: {e}"

on = st.radio("Scores on", ["your text", "the standard probe"], key="roles_on", bind="query-params",
              horizontal=True, disabled=probe_scores is None, help=f"The probe is {PROBE}.")
if probe_note:
    st.info(plain(probe_note))
scores = probe_scores if on == "the standard probe" and probe_scores is not None else text_scores
if not causal:
    st.caption(CAUSAL_NOTE)

labels = {r: ROLES[r].label for r in ROLES if r in scores}
where = "the standard probe" if scores is probe_scores else "your text"
head_chart(role_grid(scores, labels, f"Strongest role of each head, on {where} · click a head to open it"),
           "role_grid", trace.stack(stack).weights.shape[1])

with st.expander("What each role means"):
    st.markdown("\n".join(f"- **{role.label}**: {role.definition}. {role.reference}." for r, role in ROLES.items()
                          if r in labels))
    st.markdown(f"Scores are averaged over the query rows where a role is defined. The probe: {PROBE}.")

table = role_table(text_scores, probe_scores, by_probe=scores is probe_scores)
st.dataframe(table, hide_index=True, key="role_table")
st.download_button("Download the scores (CSV)", table.to_csv(index=False), f"{file_stem(f.model_key)}_roles.csv",
                   "text/csv", key="roles_csv", on_click="ignore")

st.header("Long context")
atlas_section(f)
