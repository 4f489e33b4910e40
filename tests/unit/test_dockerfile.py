"""The Dockerfile's steps, without a container engine (none can pull a base image here): parse it, run its install
steps in a fresh virtual environment on a copy of the build context, start the app with its own command and ask its
own health check; and the deploy guide's Spaces recipe (docs/deploy.md: Docker SDK front matter).

The venv is made with --system-site-packages: it still starts empty of anything the steps install into it (attnviz
itself, editable, from the copied context), but finds the pinned packages already installed here instead of
downloading ~2 GB again, and the CPU wheel index (download.pytorch.org) is out of reach of this machine: pip sees
torch==2.13.0 satisfied and does not ask it.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from conftest import ROOT, free_port

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_of(steps) -> dict:
    env = {}
    for word, rest in steps:
        if word == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    return env


def test_the_dockerfile_says_what_a_hosted_demo_needs():
    steps = instructions()
    words = [w for w, _ in steps]
    assert words[0] == "FROM" and steps[0][1].startswith("python:3.11")
    env = env_of(steps)
    assert env["ATTNVIZ_PUBLIC"] == "1" and env["PORT"] == "7860"
    runs = [r for w, r in steps if w == "RUN"]
    torch = next(r for r in runs if "torch" in r)
    assert "torch==2.13.0" in torch.split() and "--index-url https://download.pytorch.org/whl/cpu" in torch
    assert runs.index(torch) < runs.index("pip install -r requirements.txt")  # the CPU wheel before PyPI's
    user = [r for w, r in steps if w == "USER"]
    assert user and user[-1] not in ("root", "0") and words.index("USER") > words.index("RUN")
    assert any(re.match(r"useradd .*--uid 1000 " + re.escape(user[-1]) + "$", r) for r in runs)
    exposed = " ".join(r for w, r in steps if w == "EXPOSE").split()
    assert {"7860", "8501"} <= set(exposed)
    health = next(r for w, r in steps if w == "HEALTHCHECK")
    assert "/_stcore/health" in health and " CMD " in f" {health}"


def test_the_dockerfiles_steps_install_and_start_a_healthy_app(tmp_path):
    steps = instructions()
    env = env_of(steps)
    context = tmp_path / "app"  # COPY . . of the build context, without what .dockerignore leaves out
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip()]
    for name in files:
        if any(Path(name).match(p) or name.startswith(p.rstrip("/") + "/") for p in ignored) or not (ROOT / name).is_file():
            continue
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, context / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    bin_ = venv / "bin"
    run_env = {**os.environ, **env, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    run_env.pop("PYTHONPATH", None)  # the app must import the attnviz the steps installed
    for command in [r for w, r in steps if w == "RUN" and r.startswith("pip ")]:  # useradd needs root: the user is checked above
        done = subprocess.run(command, shell=True, cwd=context, env=run_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    where = subprocess.run([str(bin_ / "python"), "-c", "import attnviz; print(attnviz.__file__)"], cwd=tmp_path,
                           env=run_env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(context)), where

    cmd = shlex.split(next(r for w, r in steps if w == "CMD").replace("[", "").replace("]", "").replace(",", " "))
    assert cmd[:2] == ["sh", "-c"] and "0.0.0.0" in cmd[2]
    assert "python -m attnviz.ui.serve" in cmd[2]  # the server's limits (long links, upload caps) set before it serves
    port = free_port()
    # The container listens on every interface; a test on a shared machine listens on loopback only.
    server = subprocess.Popen(["sh", "-c", cmd[2].replace("0.0.0.0", "127.0.0.1")], cwd=context,
                              env={**run_env, "PORT": str(port)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        health = next(r for w, r in steps if w == "HEALTHCHECK").split(" CMD ", 1)[1]
        deadline, ok = time.time() + 180, False
        while time.time() < deadline and not ok:
            assert server.poll() is None, server.stderr.read()[-2000:]
            ok = subprocess.run(health, shell=True, env={**run_env, "PORT": str(port)}, capture_output=True).returncode == 0
            time.sleep(0 if ok else 1)
        assert ok, "the health check never passed"
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert "<noscript>" in page  # Streamlit's page, served by the installed app
    finally:
        server.terminate()
        server.wait(timeout=30)


def front_matter(block: str) -> dict:
    """The YAML front matter printed by the deploy guide's Spaces step (simple ``key: value`` lines)."""
    m = re.search(r"printf -- '---\\n(.*?)\\n---\\n", block)
    assert m, "the Spaces step prints no front matter"
    return dict(line.split(": ", 1) for line in m.group(1).split("\\n"))


def test_the_deploy_guides_spaces_recipe_is_for_the_docker_sdk():
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    spaces = deploy.split("**Hugging Face Spaces", 1)[1].split("\n**", 1)[0]
    meta = front_matter(spaces)
    assert meta["sdk"] == "docker"
    assert meta["app_port"] == "7860" == env_of(instructions())["PORT"]
    assert "sdk_version" not in meta and "app_file" not in meta  # Streamlit-SDK keys the Docker SDK does not read
    assert "docker build" in deploy and "docker run" in deploy and "Community Cloud" in deploy
