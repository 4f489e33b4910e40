"""``from_npz`` checks what it reads as the trace does: weights, meta and size, each refused in plain words."""

import io
import json
import tracemalloc
import zipfile

import numpy as np
import pytest

import attnviz
from attnviz.export import from_npz, to_npz


@pytest.fixture(scope="module")
def members():
    """A real trace's .npz members, to spoil one at a time."""
    with np.load(io.BytesIO(to_npz(attnviz.trace("The cat sat on the mat.", "builtin:seed")))) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def seq2seq_members():
    with np.load(io.BytesIO(to_npz(attnviz.trace("Friday, the 5th of March 2021", "builtin:translator")))) as f:
        return {k: f[k] for k in f.files}


def npz(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def spoiled(members, **changes) -> bytes:
    return npz({**members, **changes})


def meta_with(members, **fields) -> bytes:
    meta = json.loads(str(members["meta"]))
    meta.update(fields)
    return spoiled(members, meta=np.array(json.dumps(meta)))


def weights(members, change) -> np.ndarray:
    a = members["attentions"].copy()
    change(a)
    return a


def test_a_valid_file_with_fully_masked_rows_reads_back(members):
    a = members["attentions"].copy()
    a[:, :, 2] = 0  # a query that sees nothing: an all-zero row is allowed
    back = from_npz(spoiled(members, attentions=a))
    np.testing.assert_array_equal(back.attentions, a)


BAD_WEIGHTS = {  # the checks of attnviz.from_attentions too (core.weights.given_weights): tests/app/test_hostile_input.py
    "nan": (lambda a: a.__setitem__((0, 0, 0, 0), np.nan),
            "attentions holds NaN or infinite values (first in layer 0, head 0, query 0)"),
    "inf": (lambda a: a.__setitem__((1, 2, 3, 4), np.inf),
            "attentions holds NaN or infinite values (first in layer 1, head 2, query 3)"),
    "negative": (lambda a: (a.__setitem__((0, 1, 2, 3), -0.5), a.__setitem__((0, 1, 2, 4), a[0, 1, 2, 4] + 0.5)),
                 "attentions holds negative weights (first in layer 0, head 1, query 2)"),
    "rows": (lambda a: a.__imul__(0.5),
             "rows of attentions must sum to 1 within 0.001 (0 where fully masked); layer 0, head 0, query 0 sums to 0.5"),
}


@pytest.mark.parametrize("case", list(BAD_WEIGHTS))
def test_bad_weights_are_refused(members, case):
    change, message = BAD_WEIGHTS[case]
    with pytest.raises(ValueError) as refused:
        from_npz(spoiled(members, attentions=weights(members, change)))
    assert str(refused.value) == f"this .npz is not a valid attnviz trace: {message}"


def test_complex_and_integer_weights_are_refused(members):
    with pytest.raises(ValueError, match="holds complex64 values"):
        from_npz(spoiled(members, attentions=members["attentions"].astype(np.complex64)))
    with pytest.raises(ValueError, match="attentions must be real floating-point weights"):
        from_npz(spoiled(members, attentions=(members["attentions"] > 0.5).astype(np.int32)))


def test_bad_cross_attention_is_refused(seq2seq_members):
    cross = seq2seq_members["cross_attentions"].copy()
    cross[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="cross_attentions holds NaN"):
        from_npz(spoiled(seq2seq_members, cross_attentions=cross))


BAD_META = {
    "not json": lambda m: spoiled(m, meta=np.array("{not json")),
    "a list": lambda m: spoiled(m, meta=np.array("[1, 2]")),
    "no tokens": lambda m: spoiled(m, meta=np.array(json.dumps(
        {k: v for k, v in json.loads(str(m["meta"])).items() if k != "tokens"}))),
    "tokens a string": lambda m: meta_with(m, tokens="abc"),
    "tokens of numbers": lambda m: meta_with(m, tokens=list(range(8))),
    "norms a dict": lambda m: meta_with(m, norms={"a": 1}),
    "truncated true": lambda m: meta_with(m, truncated=True),
    "text null": lambda m: meta_with(m, text=None),
    "seq2seq without stacks": lambda m: meta_with(m, kind="encoder-decoder", generated=False),
    "seq2seq without generated": lambda m: meta_with(m, kind="encoder-decoder"),
    "missing member": lambda m: npz({k: v for k, v in m.items() if k != "special"}),
    "hidden states claimed": lambda m: npz({k: v for k, v in m.items() if k != "hidden_states"}),
    "unknown kind": lambda m: meta_with(m, kind="banana"),
}


@pytest.mark.parametrize("case", list(BAD_META))
def test_malformed_meta_is_a_value_error_in_plain_words(members, case):
    with pytest.raises(ValueError) as refused:  # never KeyError, TypeError or AttributeError
        from_npz(BAD_META[case](members))
    assert type(refused.value) is ValueError and "Traceback" not in str(refused.value)


def test_a_file_that_is_not_a_zip_is_refused():
    with pytest.raises(ValueError, match="not an .npz"):
        from_npz(b"PK\x03\x04 but not really a zip")


def _bomb(mb: int) -> bytes:
    """An .npz whose one member is ``mb`` MB of zeros, deflated to a small fraction: written in chunks."""
    buf = io.BytesIO()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (mb * 2**18,)})
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("attentions.npy", "w", force_zip64=True) as f:
        f.write(header.getvalue())
        chunk = bytes(2**20)
        for _ in range(mb):
            f.write(chunk)
    return buf.getvalue()


def _lying_header() -> bytes:
    """A member whose .npy header declares 4 GiB that are not there: numpy would allocate them first."""
    buf, header = io.BytesIO(), io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (2**30,)})
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("attentions.npy", header.getvalue() + bytes(64))
    return buf.getvalue()


@pytest.mark.parametrize("make", [lambda: _bomb(600), _lying_header], ids=["600MB-of-zeros", "lying-header"])
def test_a_file_that_would_expand_past_the_cap_is_refused_before_reading(make):
    data = make()
    assert len(data) < 2 * 2**20  # small as sent
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="expands to more than 512 MB"):
            from_npz(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak  # nothing of the expanded size was allocated
