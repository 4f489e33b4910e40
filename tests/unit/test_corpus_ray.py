"""Corpus mode on a real local Ray cluster (ray.init(num_cpus=2) in this process) gives the in-process table."""

import os
from pathlib import Path

import numpy as np
import pytest

from attnviz import corpus as cp
from attnviz.data import CORPUS

if os.environ.get("CI"):
    import ray  # CI installs requirements-ray.txt: a missing Ray is a failure there
else:
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install -r requirements-ray.txt")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster():
    # Workers import attnviz from this checkout (an installed copy elsewhere may be another version).
    ray.init(num_cpus=2, include_dashboard=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def test_ray_equals_in_process(cluster, tmp_path):
    local = cp.run("builtin:minilm", CORPUS, tmp_path / "local.parquet", limit=40, shard_texts=16, batch_texts=8)
    seen = []
    remote = cp.run("builtin:minilm", CORPUS, tmp_path / "ray.parquet", limit=40, shard_texts=16, batch_texts=8,
                    ray_address="auto", progress=seen.append)
    assert sorted(seen) == seen and seen[-1] == 40 and len(seen) == 3
    assert list(remote.ids) == list(range(40))
    np.testing.assert_array_equal(remote.n_tokens, local.n_tokens)
    for name in cp.NAMES:
        np.testing.assert_allclose(remote.values[name], local.values[name], atol=2e-5, err_msg=name)
    a, b = local.table(), remote.table()
    np.testing.assert_allclose(b.drop(columns=["layer", "head"]).to_numpy(), a.drop(columns=["layer", "head"]).to_numpy(),
                               atol=2e-5)

    # resumable on Ray too: a lost shard is the only one computed again
    shards = sorted(cp.shard_dir(tmp_path / "ray.parquet").glob("shard-*.npz"))
    shards[0].unlink()
    seen.clear()
    again = cp.run("builtin:minilm", CORPUS, tmp_path / "ray.parquet", limit=40, shard_texts=16, batch_texts=8,
                   ray_address="auto", progress=seen.append)
    assert seen == [40]
    np.testing.assert_allclose(again.values["entropy"], local.values["entropy"], atol=2e-5)
