"""Every backend declares what it can do beyond tracing a text (Backend.abilities, keys of ABILITIES), and callers
ask ``backend.can(...)`` instead of probing for methods: here each declaration is checked against what the backend
does. A declared ability runs and gives a real result; one not declared is refused with a ValueError (or the
backend has no such method at all)."""

import numpy as np
import pytest

import attnviz
from attnviz.backends.common import ABILITIES
from attnviz.backends.generation import Generation, Sampling
from attnviz.backends.positions import PositionInfo
from attnviz.core.trace import AttentionTrace

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TEXT = "anna saw the red ball in the garden"


def generate(m):
    g = m.generate(TEXT, Sampling(2))
    assert isinstance(g, Generation) and g.n_new >= 1


def token_ids(m):
    ids = m.plain_ids()[:5]
    t = m.trace_ids(ids, add_special_tokens=False)
    assert isinstance(t, AttentionTrace) and t.n_tokens == 5


def outputs(m):
    trace, out = m.run_with_trace(TEXT)
    assert out.shape[0] in (trace.n_tokens, len(getattr(m, "labels", ())))


def ablation(m):
    _, run = m.ablation(TEXT)
    full, none = run(np.ones((m.n_layers, m.n_heads))), run(np.zeros((m.n_layers, m.n_heads)))
    assert not np.allclose(np.asarray(full, float), np.asarray(none, float))


def positions(m):
    assert isinstance(m.position_info(), PositionInfo)


def scorer(m):
    s = m.scorer(TEXT)
    assert s.score(s.embeds[None]).shape == (1,)


def predict(m):
    probs = m.predict(TEXT)
    assert list(probs) == list(m.labels) and sum(probs.values()) == pytest.approx(1, abs=1e-6)


def translate(m):
    assert isinstance(m.translate("5 March 2021"), str)


def chat(m):
    plain, templated = m.trace(TEXT), m.trace(TEXT, chat=True)
    assert templated.n_tokens > plain.n_tokens and templated.special.sum() > plain.special.sum()


CALLS = {"chat": chat, "generate": generate, "token_ids": token_ids, "outputs": outputs, "ablation": ablation,
         "positions": positions, "scorer": scorer, "predict": predict, "translate": translate}
BUILTIN = ("builtin:minilm", "builtin:classifier", "builtin:translator", "builtin:lm")
TINY = ("bert", "gpt2", "t5")


def test_every_ability_has_a_check():
    assert set(CALLS) == set(ABILITIES)


@pytest.fixture(params=BUILTIN + TINY)
def backend(request, tiny_backend):
    return attnviz.load(request.param) if request.param in BUILTIN else tiny_backend(request.param)


def test_declared_abilities_match_what_the_backend_does(backend):
    assert backend.abilities <= set(ABILITIES) and backend.capture in ("interface", "eager")
    own_words = backend.key in ("builtin:classifier", "builtin:translator", "builtin:lm")
    assert (backend.tokenizer is None) == own_words  # attnviz's word vocabularies have no Hugging Face tokenizer
    for ability, call in CALLS.items():
        if backend.can(ability):
            call(backend)
        else:
            with pytest.raises((ValueError, AttributeError, TypeError)) as refused:
                call(backend)
            if isinstance(refused.value, AttributeError):  # no such method at all, not a slip inside the check
                assert refused.value.obj is backend, (ability, refused.value)
            if isinstance(refused.value, TypeError):  # only the backends that can("chat") know its keyword
                assert ability == "chat" and "'chat'" in str(refused.value), (ability, refused.value)


def test_an_unknown_ability_is_named():
    with pytest.raises(ValueError, match="Unknown ability 'fly'; known: generate"):
        attnviz.load("builtin:classifier").can("fly")
