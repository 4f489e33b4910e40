"""Reading a corpus: ``.txt``, ``.csv``, ``.jsonl`` or ``.parquet`` streamed within a memory budget.

A Parquet file's repeated values stay one copy and each row's size is checked before it is built; a row or file
over the limits is refused in one line that names the file.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import re
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, ContextManager, Iterator


from ..backends.common import check_text

FORMATS = (".txt", ".csv", ".jsonl", ".parquet")
MAX_TEXT_CHARS = 1_000_000  # one text (a line, a field) longer than this is a broken file, not a text
MAX_TEXT_BYTES = 4 * MAX_TEXT_CHARS  # the most UTF-8 such a text can take
READ_BYTES = 4 << 20  # what one read of a Parquet file aims to decode, judged by the rows read before it
BATCH_BYTES = 256 << 20  # with no budget for the file, the most one read may decode at MAX_TEXT_BYTES a row



class Corpus:
    """A corpus file, checked when opened (a ValueError that says what is wrong); iterating streams its texts.

    ``.txt``: one text per line, or paragraphs separated by blank lines when the file has any; ``.csv``,
    ``.jsonl``, ``.parquet``: the values of ``column``. Blank texts are skipped. Messages call the file ``name``
    (an upload's own name; default: the file's), and a Parquet file holding more than ``max_bytes`` of text is
    refused. ``peak_bytes`` is the most one pass over the file decodes at once, and every pass (the first text's, on
    opening, included) runs inside ``admit(peak_bytes)``: a server admits it as it admits other heavy work.
    """

    def __init__(self, path, column: str | None = None, name: str | None = None, max_bytes: int | None = None,
                 admit: Callable[[int], ContextManager] | None = None):
        self.path = Path(path)
        self.name, self.max_bytes = name or self.path.name, max_bytes
        self.admit = admit or (lambda nbytes: nullcontext())
        self.peak_bytes = 2 * MAX_TEXT_BYTES  # the most one pass decodes at once: a line, or a row, and its text
        self.format = self.path.suffix.lower()
        if self.format not in FORMATS:
            raise ValueError(f"{self.name}: a corpus must be {', '.join(FORMATS)}, not {self.format or 'no extension'!r}")
        if not self.path.is_file():
            raise ValueError(f"{name or self.path}: no such file")
        if self.path.stat().st_size == 0:
            raise ValueError(f"{self.name} is empty")
        self.column = column or "text"
        if self.format != ".parquet":
            with self.path.open("rb") as f:
                head = f.read(65536)
            if b"\0" in head:
                raise ValueError(f"{self.name} looks binary (it has NUL bytes), not UTF-8 text")
            try:
                head.decode("utf-8")
            except UnicodeDecodeError as e:
                if e.start < len(head) - 4:  # not just a character cut at the end of the sample
                    raise ValueError(f"{self.name} is not UTF-8 text (byte {e.start})") from None
            # paragraphs when a blank line separates two texts (not just trailing blank lines)
            self.paragraphs = self.format == ".txt" and re.search(rb"\S[ \t\r]*\n[ \t\r]*\n\s*\S", head) is not None
        self._check_column()
        if next(iter(self), None) is None:  # reads up to the first text, no further
            raise ValueError(f"{self.name} has no texts")

    def _check_column(self) -> None:
        if self.format == ".txt":
            return
        if self.format == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            try:
                with pq.ParquetFile(self.path) as f:
                    schema, meta = f.schema_arrow, f.metadata
            except Exception as e:
                raise ValueError(f"{self.name} is not a Parquet file: {e}") from None
            names = schema.names
            if self.column in names:
                kind = schema.field(self.column).type
                text = kind.value_type if pa.types.is_dictionary(kind) else kind
                if not (pa.types.is_string(text) or pa.types.is_large_string(text)):
                    raise ValueError(f"{self.name}: its column {self.column!r} holds {kind}, not text")
                self._check_sizes(meta)
                self._check_pages(meta)
        elif self.format == ".csv":
            with self._open() as f:
                names = next(csv.reader(f), [])
        else:
            first = next((line for line in self._lines() if line.strip()), "{}")
            names = list(self._json(first, 1))
        if self.column not in names:
            raise ValueError(f"{self.name} has no column {self.column!r}; its columns: {', '.join(map(str, names)) or 'none'}")

    def _chunks(self, meta) -> list:
        """The column's chunk metadata in each row group."""
        return [next(c for c in (rg.column(j) for j in range(rg.num_columns)) if c.path_in_schema == self.column)
                for rg in (meta.row_group(i) for i in range(meta.num_row_groups))]

    def _check_sizes(self, meta) -> None:
        """Refuse a Parquet file whose own metadata says its text is over ``max_bytes`` once uncompressed."""
        declared = sum(c.total_uncompressed_size for c in self._chunks(meta))
        if self.max_bytes is not None and declared > self.max_bytes:
            raise ValueError(f"{self.name}: its column {self.column!r} holds {declared / 1e6:,.0f} MB uncompressed, "
                             f"over the {self.max_bytes / 1e6:,.0f} MB taken here")

    def _check_pages(self, meta) -> None:
        """Refuse a Parquet file with a page that decodes to more than the budget: a page is decoded whole, however few
        of its rows are read. Its header's size binds the decoder (Arrow refuses a page that decodes to another size),
        so it is the one size in the file that is a fact."""
        budget = self.max_bytes if self.max_bytes is not None else BATCH_BYTES
        self.largest_page = 0
        with self.path.open("rb") as f:
            for chunk in self._chunks(meta):
                at = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                end, values, counted = at + chunk.total_compressed_size, chunk.num_values, 0
                while at < end and counted < values:
                    f.seek(at)
                    header = _PageHeader(f.read(PAGE_HEADER_BYTES))
                    if header.decoded > budget:
                        raise ValueError(f"{self.name}: a page of its column {self.column!r} decodes to "
                                         f"{header.decoded / 1e6:,.0f} MB, over the {budget / 1e6:,.0f} MB taken here")
                    self.largest_page = max(self.largest_page, header.decoded)
                    at += header.length + header.stored
                    counted += header.values
        self.peak_bytes = self.largest_page + 2 * max(READ_BYTES, MAX_TEXT_BYTES)  # a page whole, a read, its texts

    def _parquet(self) -> Iterator:
        """The column's values, a few rows at a time. A file's metadata is a claim, not a fact, so how many rows one
        read decodes comes from the rows already decoded (READ_BYTES over the largest so far) and from what is left of
        the budget at the most one row can be (its page, or MAX_TEXT_BYTES): any file is refused within its budget."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        total, row, largest = 0, 0, 0
        row_max = max(1, min(MAX_TEXT_BYTES, self.largest_page))  # no row decodes to more than the page it is in

        def step() -> int:
            room = (self.max_bytes - total) if self.max_bytes is not None else BATCH_BYTES
            return int(max(1, min(1024, READ_BYTES // (largest or row_max), room // row_max)))

        with pq.ParquetFile(self.path, pre_buffer=False) as f:
            f.reader.set_batch_size(step())
            for batch in f.iter_batches(batch_size=step(), columns=[self.column]):
                values = batch.column(0)
                if pa.types.is_dictionary(values.type):  # a categorical column: its rows as values, this batch's only
                    values = values.dictionary_decode()
                sizes = pc.utf8_length(values).fill_null(0).to_numpy(zero_copy_only=False)  # (rows,) characters
                if len(sizes) and sizes.max() > MAX_TEXT_CHARS:
                    at = int(sizes.argmax())
                    raise ValueError(f"{self.name}: row {row + at + 1:,} holds {sizes[at]:,} characters, over "
                                     f"the {MAX_TEXT_CHARS:,} one text may have")
                for i, (n, text) in enumerate(zip(sizes.tolist(), values.to_pylist())):
                    total += n
                    if self.max_bytes is not None and total > self.max_bytes:
                        raise ValueError(f"{self.name} holds more than {self.max_bytes / 1e6:,.0f} MB of text by "
                                         f"row {row + i + 1:,}, the most taken here")
                    yield text
                row += len(values)
                largest = max(largest, int(pc.max(pc.binary_length(values)).as_py() or 0), 1)  # bytes
                f.reader.set_batch_size(step())  # the next read, sized by what this one decoded

    def _open(self):
        return self.path.open(encoding="utf-8", newline="")

    def _lines(self) -> Iterator[str]:
        """The file's lines, refusing one over MAX_TEXT_CHARS without reading it whole."""
        with self._open() as f:
            for number, line in enumerate(iter(lambda: f.readline(MAX_TEXT_CHARS + 2), ""), 1):
                if len(line) > MAX_TEXT_CHARS and not line.endswith("\n"):
                    raise ValueError(f"{self.name}: line {number} is longer than {MAX_TEXT_CHARS:,} characters")
                yield line

    def _json(self, line: str, number: int) -> dict:
        try:
            record_ = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.name}: line {number} is not JSON ({e.msg})") from None
        if not isinstance(record_, dict):
            raise ValueError(f"{self.name}: line {number} is not a JSON object")
        return record_

    def _raw(self) -> Iterator:
        if self.format == ".txt":
            if not self.paragraphs:
                yield from self._lines()
                return
            block: list[str] = []
            for line in self._lines():
                if line.strip():
                    block.append(line)
                elif block:
                    yield "".join(block)
                    block = []
            if block:
                yield "".join(block)
        elif self.format == ".jsonl":
            for number, line in enumerate(self._lines(), 1):
                if line.strip():
                    yield self._json(line, number).get(self.column)
        elif self.format == ".csv":
            csv.field_size_limit(MAX_TEXT_CHARS)
            with self._open() as f:
                try:
                    yield from (row.get(self.column) for row in csv.DictReader(f))
                except csv.Error as e:
                    raise ValueError(f"{self.name}: {e} (a field over {MAX_TEXT_CHARS:,} characters?)") from None
        else:
            yield from self._parquet()

    def __iter__(self) -> Iterator[str]:
        with self.admit(self.peak_bytes):  # left when the pass ends, or when its reader is dropped
            yield from self._texts()

    def _texts(self) -> Iterator[str]:
        values = self._raw()
        while True:
            try:
                value = next(values)
            except StopIteration:
                return
            except UnicodeDecodeError as e:  # past the sample checked on opening
                raise ValueError(f"{self.name} is not UTF-8 text (byte {self._bad_byte():,}: {e.reason})") from None
            if not isinstance(value, str):
                continue
            if len(value) > MAX_TEXT_CHARS:
                raise ValueError(f"{self.name}: a text is longer than {MAX_TEXT_CHARS:,} characters")
            try:
                yield check_text(value.strip())
            except ValueError:  # blank
                continue

    def _bad_byte(self) -> int:
        """Where the file's first byte that is not UTF-8 is (a second pass, made only to say so)."""
        decoder, at = codecs.getincrementaldecoder("utf-8")(), 0
        with self.path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                pending = len(decoder.getstate()[0])  # the start of a character the last chunk cut
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as e:
                    return at - pending + e.start
                at += len(chunk)
        return at

    def fingerprint(self) -> str:
        """What identifies this input for resumption: path, size, modification time, column."""
        s = self.path.stat()
        return f"{self.path.resolve()}|{s.st_size}|{s.st_mtime_ns}|{self.column}"


PAGE_HEADER_BYTES = 1 << 16  # a page header holds its sizes and statistics; more than this is not a header


class _PageHeader:
    """The sizes in a Parquet page header (Thrift compact protocol): ``decoded`` and ``stored`` bytes, ``values``,
    and the header's own ``length``. A ValueError when the bytes are not a header."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0
        self.decoded = self.stored = self.values = 0
        try:
            self._struct(top=True)
        except IndexError:
            raise ValueError("a Parquet page header is damaged or too long") from None
        self.length = self.at
        if min(self.decoded, self.stored, self.values) < 0:
            raise ValueError("a Parquet page header is damaged")

    def _varint(self) -> int:
        n = shift = 0
        while True:
            b = self.data[self.at]
            self.at += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    def _int(self) -> int:
        n = self._varint()
        return (n >> 1) ^ -(n & 1)  # zigzag

    def _value(self, kind: int, field: int = 0, top: bool = False) -> None:
        if kind in (1, 2):  # booleans carry their value in the type
            return
        if kind == 3:
            self.at += 1
        elif kind in (4, 5, 6):
            n = self._int()
            if top and field in (2, 3):  # uncompressed_page_size, compressed_page_size
                setattr(self, "decoded" if field == 2 else "stored", n)
        elif kind == 7:
            self.at += 8
        elif kind == 8:
            size = self._varint()
            self.at += size
        elif kind in (9, 10):
            head = self.data[self.at]
            self.at += 1
            size = head >> 4 if head >> 4 != 15 else self._varint()
            for _ in range(size):
                self._value(head & 0x0F)
        elif kind == 11:
            size = self._varint()
            if size:
                types = self.data[self.at]
                self.at += 1
                for _ in range(size):
                    self._value(types >> 4)
                    self._value(types & 0x0F)
        elif kind == 12:
            self._struct(values_of=field if top else 0)
        else:
            raise ValueError(f"a Parquet page header holds an unknown type {kind}")

    def _struct(self, top: bool = False, values_of: int = 0) -> None:
        field = 0
        while True:
            head = self.data[self.at]
            self.at += 1
            if head == 0:
                return
            field = field + (head >> 4) if head >> 4 else self._int()
            if values_of in (5, 8) and field == 1 and head & 0x0F == 5:  # a data page's num_values (v1, v2)
                self.values = self._int()
                continue
            self._value(head & 0x0F, field, top)


def texts_by_id(corpus, ids) -> dict[int, str]:
    """The texts with the given positions in the corpus (one more pass over it)."""
    wanted, found = set(int(i) for i in ids), {}
    for i, text in enumerate(corpus):
        if i in wanted:
            found[i] = text
            if len(found) == len(wanted):
                break
    return found



def count(corpus, limit: int | None = None) -> int:
    """How many texts a run will take (one pass over the file)."""
    n = 0
    for _ in corpus:
        n += 1
        if limit is not None and n >= limit:
            break
    return n

def digest(data: bytes) -> str:
    """A short name for uploaded bytes: the page keeps an upload's shards under it."""
    return hashlib.sha256(data).hexdigest()[:16]
