"""Reading a corpus: ``.txt``, ``.csv``, ``.jsonl`` or ``.parquet`` streamed within a memory budget.

A Parquet file's repeated values stay one copy and each row's size is checked before it is built; a row or file
over the limits is refused in one line that names the file.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import Iterator


from ..backends.common import check_text

FORMATS = (".txt", ".csv", ".jsonl", ".parquet")
MAX_TEXT_CHARS = 1_000_000  # one text (a line, a field) longer than this is a broken file, not a text
READ_BYTES = 4 << 20  # what one read of a Parquet file may decode at once, by its own metadata



class Corpus:
    """A corpus file, checked when opened (a ValueError that says what is wrong); iterating streams its texts.

    ``.txt``: one text per line, or paragraphs separated by blank lines when the file has any; ``.csv``,
    ``.jsonl``, ``.parquet``: the values of ``column``. Blank texts are skipped. Messages call the file ``name``
    (an upload's own name; default: the file's), and a Parquet file holding more than ``max_bytes`` of text is
    refused.
    """

    def __init__(self, path, column: str | None = None, name: str | None = None, max_bytes: int | None = None):
        self.path = Path(path)
        self.name, self.max_bytes = name or self.path.name, max_bytes
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
            import pyarrow.parquet as pq

            try:
                with pq.ParquetFile(self.path) as f:
                    names, meta = f.schema_arrow.names, f.metadata
            except Exception as e:
                raise ValueError(f"{self.name} is not a Parquet file: {e}") from None
            if self.column in names:
                self._check_sizes(meta)
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

    def _parquet(self) -> Iterator:
        """The column's values, in batches the metadata says decode to about READ_BYTES; each row's size is read
        from the batch before the row is built, so a small file of huge repeated values never expands."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        total, row = 0, 0
        # read_dictionary: a value repeated in every row stays one copy (a 600-byte file can hold 1 MB rows)
        with pq.ParquetFile(self.path, read_dictionary=[self.column], pre_buffer=False) as f:
            for group, chunk in enumerate(self._chunks(f.metadata)):
                rows = f.metadata.row_group(group).num_rows
                size = max(chunk.total_compressed_size, chunk.total_uncompressed_size, 1)
                step = int(min(1024, max(1, READ_BYTES * rows // size)))
                for batch in f.iter_batches(batch_size=step, row_groups=[group], columns=[self.column]):
                    values = batch.column(0)
                    kind = values.type.value_type if pa.types.is_dictionary(values.type) else None
                    if kind is None or not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                        row += len(values)
                        continue  # not text: skipped, as a non-string value is
                    sizes = pc.take(pc.utf8_length(values.dictionary), values.indices).fill_null(0).to_numpy(
                        zero_copy_only=False)  # (rows,) characters of each row's text
                    if len(sizes) and sizes.max() > MAX_TEXT_CHARS:
                        at = int(sizes.argmax())
                        raise ValueError(f"{self.name}: row {row + at + 1:,} holds {sizes[at]:,} characters, over "
                                         f"the {MAX_TEXT_CHARS:,} one text may have")
                    for i, n in enumerate(sizes.tolist()):
                        total += n
                        if self.max_bytes is not None and total > self.max_bytes:
                            raise ValueError(f"{self.name} holds more than {self.max_bytes / 1e6:,.0f} MB of text by "
                                             f"row {row + i + 1:,}, the most taken here")
                        yield values[i].as_py()
                    row += len(values)

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
        for value in self._raw():
            if not isinstance(value, str):
                continue
            if len(value) > MAX_TEXT_CHARS:
                raise ValueError(f"{self.name}: a text is longer than {MAX_TEXT_CHARS:,} characters")
            try:
                yield check_text(value.strip())
            except ValueError:  # blank
                continue

    def fingerprint(self) -> str:
        """What identifies this input for resumption: path, size, modification time, column."""
        s = self.path.stat()
        return f"{self.path.resolve()}|{s.st_size}|{s.st_mtime_ns}|{self.column}"


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
