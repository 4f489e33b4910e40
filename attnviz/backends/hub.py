"""What may be loaded, and from where: attnviz never runs a model's own code and reads only safetensors.

Every Hugging Face model passes here before any weight is read: its folder (or hub snapshot, or GGUF file) is
located, its config refused when it asks for custom code (``auto_map``) or is not a model's, its weights refused
when they are pickles (unless ATTNVIZ_ALLOW_PICKLE) or damaged, and its size weighed against ATTNVIZ_MAX_MODEL_MB
(the bytes its weights will hold) and the server's budget (its config's heads and parameters). The hub is asked
only for what is missing, and only for safe files.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import settings
from ..core.budget import check_budget
from . import gguf

# What a model folder needs besides its weights.
META_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "merges.txt", "vocab.*"]

AUTO = {"encoder": "AutoModel", "decoder": "AutoModelForCausalLM", "encoder-decoder": "AutoModelForSeq2SeqLM"}


def admit_folder(folder: Path, name: str):
    """(config, kind, safe) of the Hugging Face model folder ``folder`` (``name``: as the key names it), refused in
    words before any weight is read when it needs custom code, is over the budget, or holds unsafe, damaged or too
    many bytes of weights; ``safe``: its weights are safetensors."""
    config, kind = read_config(folder)
    admit_config(config, kind)
    sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}
    weights, safe = _weights(sizes, f"the folder {folder}", name)
    if safe:
        _check_safetensors(folder, weights)
    return config, kind, safe


def admit_gguf(file: Path, name: str):
    """The header of GGUF file ``file``, refused in words when transformers cannot read its family or its weights,
    dequantised to float32 as transformers loads them, are over ATTNVIZ_MAX_MODEL_MB."""
    header = gguf.read(file)
    if not gguf.supported(header.architecture):
        raise ValueError(gguf.unsupported(file, header.architecture))
    check_size(header.float32_bytes, name, " (dequantised to float32, as transformers loads them)")
    return header


def refusal(model_type: str, reason: str) -> str:
    """The one form of "this model cannot be traced exactly": the family, then the reason in words."""
    return f"attnviz cannot trace {model_type} models exactly: {reason}."


def admit_config(config, kind: str) -> None:
    """The memory admission from the config alone, before any weight is read."""
    from transformers.integrations.heterogeneity.configuration_utils import AmbiguousGlobalPerLayerAttributeError

    try:
        check_budget(config, kind)
    except AmbiguousGlobalPerLayerAttributeError as e:  # layers that differ in heads or widths: no one value
        what = str(e).split("'")[1] if "'" in str(e) else "a setting"
        raise ValueError(refusal(config.model_type, f"its layers differ in {what} (a per-layer config), and "
                                                    "attnviz reads one value for the whole model")) from None


def locate(name: str) -> Path:
    """A local model folder for ``name`` (the folder itself, or the hub snapshot after the safety checks), or the
    GGUF file it names or its folder holds."""
    path = Path(name).expanduser()
    if path.exists():
        if path.is_file():
            if path.suffix.lower() == gguf.SUFFIX:
                return path
            raise ValueError(f"{name!r} is a file; give the folder that holds config.json and the weights, or a "
                             f"{gguf.SUFFIX} file.")
        return _gguf_in(path, f"the folder {path}") or path
    if name.startswith(("/", "~", ".")) or "\\" in name or name.count("/") > 2 or (
            name.count("/") == 2 and not name.lower().endswith(gguf.SUFFIX)):
        raise ValueError(f"There is no folder {name!r}.")
    return _from_hub(name)


def _gguf_in(folder: Path, where: str, files=None, named: str | None = None) -> Path | None:
    """The one GGUF file of a folder with no config.json (``files``: its names, when not on disk; ``named``: how a
    model key names the folder); None when it is a Hugging Face folder or holds no GGUF file; refused when it holds
    several."""
    files = [p.name for p in folder.iterdir() if p.is_file()] if files is None else files
    found = sorted(f for f in files if "/" not in f and f.lower().endswith(gguf.SUFFIX))
    if "config.json" in files or not found:
        return None
    if len(found) > 1:
        raise ValueError(f"{where} holds {len(found)} GGUF files ({', '.join(found[:4])}"
                         f"{', …' if len(found) > 4 else ''}): give the one to load, e.g. "
                         f"hf:{named or folder}/{found[0]}")
    return folder / found[0]


def _offline_message(name: str, repo: str, named: str | None, held: list[str]) -> str:
    """Why ``name`` cannot be had offline: a file the cached copy of ``repo`` lacks is named with the GGUF files it
    does hold (``held``), which load without the hub."""
    if named is not None and held:
        return (f"The cached copy of {repo!r} has no file {named!r}; it holds {', '.join(held)}. Try "
                f"hf:{repo}/{held[0]}: the Hugging Face hub is out of reach (offline?), so it cannot be asked for "
                "other files.")
    return (
        f"Could not reach the Hugging Face hub for {name!r} (offline?). Download the model elsewhere and give "
        "its local folder, e.g. hf:/path/to/folder"
    )


def _from_hub(name: str) -> Path:
    """The cached snapshot of hub model ``name``, downloaded (safe weights only, size checked) if needed; for a repo
    of GGUF files (``org/model`` with one, or ``org/model/file.gguf``), that file."""
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub import errors as hub
    from huggingface_hub.utils import validate_repo_id

    repo, named = (name.rsplit("/", 1)[0], name.rsplit("/", 1)[1]) if name.count("/") == 2 else (name, None)
    try:
        validate_repo_id(repo)
    except hub.HFValidationError:
        raise ValueError(f"{name!r} is neither a folder nor a Hugging Face model id like 'org/model'.") from None
    held = []  # the GGUF files of the cached snapshot, named when the one asked for is not among them
    try:
        cached = Path(snapshot_download(repo, local_files_only=True))
        held = sorted(p.name for p in cached.iterdir() if p.is_file() and p.name.lower().endswith(gguf.SUFFIX))
        # Loading only a tokenizer caches config.json too: a snapshot without weights is not the model.
        if named is not None and (cached / named).is_file():
            return cached / named
        if named is None and (found := _gguf_in(cached, f"the hub model {repo!r}", named=repo)) is not None:
            return found
        if (cached / "config.json").is_file() and [*cached.glob("model*.safetensors"), *cached.glob("*.bin")]:
            return cached
    except hub.LocalEntryNotFoundError:
        pass
    if settings.hub_offline():
        raise ValueError(_offline_message(name, repo, named, held))
    try:
        info = HfApi().model_info(repo, timeout=settings.hub_timeout(), files_metadata=True)
    except hub.RepositoryNotFoundError:
        raise ValueError(f"There is no model {name!r} on the Hugging Face hub (or it is private).") from None
    except hub.GatedRepoError:
        raise ValueError(
            f"{name!r} is gated on the hub: accept its licence and log in, or download it and give its folder."
        ) from None
    except hub.HfHubHTTPError as e:
        raise ValueError(f"The Hugging Face hub refused {name!r}: {e}") from None
    except Exception:  # connection refused, DNS failure, timeout: all mean the hub is out of reach
        raise ValueError(_offline_message(name, repo, named, held)) from None
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
    if named is not None and named not in sizes:
        raise ValueError(f"The hub model {repo!r} has no file {named!r}.")
    single = Path(named) if named is not None else _gguf_in(Path(), f"the hub model {repo!r}", list(sizes), repo)
    if single is not None:  # the file is checked again, dequantised, once downloaded
        check_size(sizes[single.name], name)
        weights = [single.name]
    else:
        weights, _ = _weights(sizes, f"the hub model {name!r}", name)
    try:
        folder = Path(snapshot_download(repo, allow_patterns=META_FILES + weights,
                                        etag_timeout=settings.hub_timeout()))
    except Exception as e:
        raise ValueError(f"Downloading {name!r} from the Hugging Face hub failed: {e}") from None
    return folder / single.name if single is not None else folder


def read_config(folder: Path):
    """(config, kind) of the model in ``folder``; refuses folders that are not models or need custom code."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if not (folder / "config.json").is_file():
        raise ValueError(f"The folder {folder} has no config.json, so it is not a Hugging Face model folder.")
    for file in ("config.json", "tokenizer_config.json"):
        if not (folder / file).is_file():
            continue
        try:
            raw = json.loads((folder / file).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{file} in {folder} is not valid JSON: {e}") from None
        except RecursionError:  # json.loads recurses once per nesting level
            raise ValueError(f"{file} in {folder} nests its JSON too deeply to be a model's settings.") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{file} in {folder} is not a JSON object of settings ({{\"model_type\": …}}), "
                             "so it is not a Hugging Face model's.")
        if "auto_map" in raw:
            raise ValueError(
                f"The model in {folder} needs its own Python code ({file} has an 'auto_map'); "
                "attnviz never runs code that comes with a model."
            )
    model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type not in CONFIG_MAPPING_NAMES:
        raise ValueError(
            f"Model type {model_type!r} in {folder} is unknown to transformers: it needs custom code "
            "(which attnviz never runs) or a newer transformers."
        )
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    return config, kind_of(config)


def kind_of(config) -> str:
    """"encoder", "decoder" or "encoder-decoder": how a model of ``config`` loads and runs."""
    from transformers.models.auto import modeling_auto as auto

    # BERT-like types have causal-LM heads too; a type with a masked-LM head is an encoder unless told otherwise.
    causal = config.model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    masked = config.model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    return "decoder" if getattr(config, "is_decoder", False) or (causal and not masked) else "encoder"


def _weights(sizes: dict, where: str, name: str) -> tuple[list[str], bool]:
    """(weight files, are they safetensors) among ``sizes`` (file name -> bytes): safetensors, or pickle only with
    ATTNVIZ_ALLOW_PICKLE=1; refused too when together they are over ATTNVIZ_MAX_MODEL_MB. A folder's files and a hub
    model's pass this one check."""
    top = [f for f in sizes if "/" not in f and f.startswith("model")]
    weights = sorted(f for f in top if f.endswith(".safetensors"))
    safe = bool(weights)
    if not safe:
        pickled = sorted(f for f in sizes if "/" not in f and f.startswith("pytorch_model") and f.endswith(".bin"))
        if not pickled:
            raise ValueError(f"{where} has no model weights (model.safetensors).")
        if not settings.allow_pickle():
            raise ValueError(
                f"{where} has only a pickle checkpoint ({pickled[0]}), which can run code when loaded. Convert it "
                "to safetensors, or set ATTNVIZ_ALLOW_PICKLE=1 if you trust where it came from."
            )
        weights = pickled
    check_size(sum(sizes[w] for w in weights), name)
    return weights, safe


def check_size(nbytes: int, name: str, how: str = "") -> None:
    """Refuse weights of ``nbytes`` over ATTNVIZ_MAX_MODEL_MB (``how``: what the bytes are, when not the files')."""
    limit = settings.max_model_mb()
    if nbytes > limit * 2**20:
        raise ValueError(
            f"The weights of {name!r}{how} are {nbytes / 2**20:,.0f} MB, over the limit of {limit:,.0f} MB "
            "(raise it with ATTNVIZ_MAX_MODEL_MB)."
        )


def _check_safetensors(folder: Path, weights: list[str]) -> None:
    """Read each file's header, so a damaged file gets a plain message rather than a loader traceback."""
    from safetensors import SafetensorError, safe_open

    for w in weights:
        try:
            with safe_open(folder / w, "pt"):
                pass
        except (SafetensorError, OSError) as e:
            raise ValueError(f"The weights file {folder / w} is damaged (truncated or not safetensors): {e}") from None
