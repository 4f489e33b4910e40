"""The generated tasks, the training loop and the shipped checkpoints (builtin:classifier, builtin:translator).

Held-out data comes from seeds that neither training (TrainConfig.seed and the batch seeds drawn from
it) nor the checkpoint's own evaluation (EVAL_SEED) used. Alignment is measured on the last decoder
layer's cross-attention averaged over heads: row k (the query that writes target token k) must put
its largest weight on the source word that target token k comes from (Example.align).
"""

import calendar
import datetime
import json

import numpy as np
import pytest
import torch

import attnviz
from attnviz.backends.trained import CHECKPOINTS, load_checkpoint, save_checkpoint
from attnviz.backends.vocab import BOS, EOS, UNK, Vocab, split
from attnviz.training.tasks import TASKS
from attnviz.training.cli import main
from attnviz.training.loop import EVAL_SEED, TrainConfig, evaluate, train

HELD_OUT = 20_261_129  # a seed no training run or checkpoint evaluation uses
SHORT = {  # a few seconds each; measured over seeds 0–2: held-out ≥ 0.96 (classifier), ≥ 0.95 (translator)
    "classifier": TrainConfig(steps=120, lr=1e-2, warmup=30, eval_every=60, eval_size=200, log_every=20),
    "translator": TrainConfig(steps=150, lr=5e-3, warmup=30, eval_every=75, eval_size=200, log_every=25),
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def short_runs():
    """task -> (Trained, Progress seen by the callback) for a few seconds' training of each task."""
    out = {}
    for task in TASKS:
        seen = []
        out[task] = train(task, SHORT[task], seen.append), seen
    return out


# ---- generated data ------------------------------------------------------------------------------

def test_vocab_splits_lowercases_and_maps_unknown_words():
    v = Vocab(["[PAD]", "[UNK]", "[BOS]", "[EOS]", "march", "5", ","])
    assert split("March 5, 2021!") == ["march", "5", ",", "2021", "!"]
    assert v.tokens("March 5, 2021") == ["march", "5", ",", UNK]
    assert v.ids(["5", "nope"]) == [5, 1]
    assert v.decode([2, 4, 5, 3, 0]) == "march 5"
    assert Vocab.from_json(json.loads(json.dumps(v.to_json()))).itos == v.itos
    with pytest.raises(ValueError, match="must start with"):
        Vocab(["march"])


@pytest.mark.parametrize("name", TASKS)
def test_examples_are_deterministic_per_seed(name):
    task = TASKS[name]
    a, b, c = task.examples(50, 1), task.examples(50, 1), task.examples(50, 2)
    assert a == b and a != c
    assert all(e.source == tuple(split(e.text)) for e in a)
    assert all(t in task.source.stoi for e in a for t in e.source), "generated words must all be in the vocabulary"


def test_dates_targets_and_alignment_against_datetime():
    """Read each generated date back with the calendar module: target is its ISO form, align points at its words."""
    months = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
    months |= {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
    weekdays = {d.lower(): i for i, d in enumerate(calendar.day_name)}
    for e in TASKS["translator"].examples(300, HELD_OUT):
        year, _, month, _, day = e.target
        date = datetime.date(int(year), int(month), int(day))
        assert "".join(e.target) == date.isoformat()
        assert e.align[1] is None and e.align[3] is None  # the dashes come from no source word
        assert e.source[e.align[0]] == year
        assert months[e.source[e.align[2]]] == date.month
        assert int(e.source[e.align[4]].rstrip("stndrh")) == date.day
        named = [weekdays[w] for w in e.source if w in weekdays]
        assert named in ([], [date.weekday()])


def test_sentiment_label_is_the_cue_flipped_by_a_negation():
    task = TASKS["classifier"]
    polarity = {w: label for label, cues in task.CUES.items() for w in cues}
    for e in task.examples(300, HELD_OUT):
        (i, cue), = [(i, w) for i, w in enumerate(e.source) if w in polarity]
        negated = any(w in task.NEGATIONS for w in e.source[max(0, i - 2): i])
        assert e.target == (polarity[cue] if not negated else ({"positive", "negative"} - {polarity[cue]}).pop())
    labels = [e.target for e in task.examples(1000, HELD_OUT)]
    assert 0.4 < labels.count("positive") / len(labels) < 0.6


# ---- training ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, chance, floor", [("classifier", 0.5, 0.8), ("translator", 0.0, 0.5)])
def test_short_run_beats_chance_on_held_out_data(short_runs, name, chance, floor):
    """A few seconds' training: held-out accuracy / exact match far above chance (1/2; ~1/400,000 for dates)."""
    result, seen = short_runs[name]
    score = evaluate(result.model, TASKS[name], TASKS[name].examples(300, HELD_OUT))
    assert score >= floor > chance + 0.25, f"{name}: {score:.3f}"
    losses = [p.loss for p in seen]
    assert np.isfinite(losses).all() and np.mean(losses[-3:]) < 0.5 * losses[0]


def test_callback_sees_every_log_step_and_a_live_model_at_evaluations(short_runs):
    result, seen = short_runs["classifier"]
    assert [p.step for p in seen] == list(range(20, 121, 20))
    evals = [p for p in seen if p.scores["eval_accuracy"] is not None]
    assert [p.step for p in evals] == [60, 120] and all(p.model is result.model for p in evals)
    assert all(p.model is None for p in seen if p.scores["eval_accuracy"] is None)
    assert result.history == [p.row() for p in seen] and result.scores == evals[-1].scores
    probe = evals[-1].model.predict(TASKS["classifier"].preview)
    assert set(probe) == {"negative", "positive"} and sum(probe.values()) == pytest.approx(1, abs=1e-6)


def test_checkpoint_round_trip_reproduces_the_model(short_runs, tmp_path):
    for name, (result, _) in short_runs.items():
        weights, config = save_checkpoint(result.model, tmp_path / name)
        assert weights.stat().st_size < 5e6
        loaded = load_checkpoint(tmp_path / name, "x")
        text = TASKS[name].preview
        a, b = result.model.trace(text), loaded.trace(text)
        if name == "classifier":
            np.testing.assert_array_equal(a.attentions, b.attentions)
            assert loaded.predict(text) == result.model.predict(text)
        else:
            np.testing.assert_array_equal(a.cross_attentions, b.cross_attentions)
            assert loaded.translate(text) == result.model.translate(text)


def test_cli_trains_and_saves_a_loadable_checkpoint(tmp_path, capsys):
    main(["translator", "--steps", "3", "--eval-size", "8", "--d-model", "16", "--n-heads", "2", "--d-ff", "32",
          "--out", str(tmp_path)])
    assert "held-out" in capsys.readouterr().out
    model = load_checkpoint(tmp_path / "translator", "builtin:translator")
    assert model.net.config.d_model == 16 and model.info["training"]["steps"] == 3
    assert isinstance(model.translate("5 March 2021"), str)


def test_bad_training_settings_say_what_is_wrong():
    with pytest.raises(ValueError, match="Unknown task"):
        train("poetry")
    with pytest.raises(ValueError, match="divisible"):
        TrainConfig(d_model=30, n_heads=4)


# ---- the shipped checkpoints ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier():
    return attnviz.load("builtin:classifier")


@pytest.fixture(scope="module")
def translator():
    return attnviz.load("builtin:translator")


def test_shipped_checkpoints_are_listed_small_and_trained_on_other_seeds(classifier, translator):
    assert {"builtin:classifier", "builtin:translator"} <= set(attnviz.list_models())
    for model in (classifier, translator):
        assert model.info["training"]["seed"] != HELD_OUT and model.info["eval_seed"] == EVAL_SEED != HELD_OUT
    for f in CHECKPOINTS.iterdir():
        assert f.stat().st_size < 5e6, f


def test_shipped_classifier_accuracy(classifier):
    examples = TASKS["classifier"].examples(400, HELD_OUT)
    predictions = [max(p := classifier.predict(e.text), key=p.get) for e in examples]
    accuracy = np.mean([p == e.target for p, e in zip(predictions, examples)])
    assert accuracy >= 0.95, accuracy


def test_shipped_translator_exact_match_and_cross_attention_alignment(translator):
    examples = TASKS["translator"].examples(200, HELD_OUT)
    exact, aligned = [], []
    for e in examples:
        t = attnviz.trace(e.text, "builtin:translator")
        assert t.generated and t.decoder.tokens[0] == BOS
        exact.append(t.decoder.tokens[1:] == (*e.target, EOS))
        mean = t.cross_attentions[-1].mean(0)  # (Tt, Ts): last layer, averaged over heads
        aligned += [mean[k].argmax() == src for k, src in enumerate(e.align) if src is not None]
    assert np.mean(exact) >= 0.95, np.mean(exact)
    assert np.mean(aligned) >= 0.90, np.mean(aligned)


def test_classifier_trace_matches_its_own_forward(classifier):
    text = "Honestly, the new phone was not great, zorp"
    t = attnviz.trace(text, "builtin:classifier")
    assert t.kind == "encoder" and t.text == text
    assert t.tokens == tuple(w if w in classifier.source.stoi else UNK for w in split(text))
    with torch.no_grad():
        logits, out = classifier.net(torch.tensor([classifier.source.ids(t.tokens)]))
    np.testing.assert_allclose(t.attentions, torch.cat(out.attentions).numpy(), atol=1e-6)
    assert t.attentions.shape == (classifier.n_layers, classifier.n_heads, len(t.tokens), len(t.tokens))
    np.testing.assert_allclose(t.attentions.sum(-1), 1, atol=1e-5)
    assert set(t.norms) >= {"attn_out", "ffn_out", "value_norms"}
    probs = classifier.predict(text)
    np.testing.assert_allclose(list(probs.values()), logits[0].softmax(-1).numpy(), atol=1e-6)
    assert max(probs, key=probs.get) == "negative"


def test_translator_trace_with_a_given_target(translator):
    t = attnviz.trace("the 5th of March 2021", "builtin:translator", target="2021-03-05")
    assert not t.generated and t.kind == "encoder-decoder"
    assert t.encoder.tokens == ("the", "5th", "of", "march", "2021")
    assert t.decoder.tokens == (BOS, "2021", "-", "03", "-", "05", EOS) and t.decoder.kind == "decoder"
    assert t.decoder.special.tolist() == [True, False, False, False, False, False, True]
    assert t.cross_attentions.shape == (translator.n_layers, translator.n_heads, 7, 5)
    np.testing.assert_allclose(t.cross_attentions.sum(-1), 1, atol=1e-5)
    assert np.triu(t.decoder.attentions, 1).max() == 0  # causal
    assert translator.translate("the 5th of March 2021") == "2021-03-05"
    assert attnviz.trace("March 5, 2021", "builtin:translator").decoder.text == "2021-03-05"


def test_trained_backends_reject_bad_text_plainly(classifier, translator):
    for model in (classifier, translator):
        for bad in ("", "   \n", None):
            with pytest.raises(ValueError, match="empty|string"):
                model.trace(bad)
    with pytest.raises(ValueError, match="empty"):
        classifier.predict(" ")
    with pytest.raises(ValueError, match="target text is empty"):
        translator.trace("5 March 2021", target=" ")
    long = classifier.trace("good " * 100)
    assert long.n_tokens == classifier.max_tokens and long.truncated == 100 - classifier.max_tokens
    odd = translator.trace("le 5 mars 2021 ✨")
    assert odd.encoder.tokens == (UNK, "5", UNK, "2021", UNK)
