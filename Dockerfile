# attnviz as a hosted demo: Hugging Face Spaces (Docker SDK, app_port 7860) or any container host.
#   docker build -t attnviz . && docker run -p 8501:8501 -e PORT=8501 attnviz   # then open http://localhost:8501
FROM python:3.11-slim

# Public mode on (visitors pick among the offered models only: see docs/deploy.md); PORT 7860 is
# what Spaces expects, 8501 Streamlit's own default for running it locally.
ENV ATTNVIZ_PUBLIC=1 \
    PORT=7860 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    STREAMLIT_BROWSER_GATHER_USAGE_STATS=false

# Spaces runs the container as user 1000: the app and its files belong to that user, never root.
RUN useradd --create-home --uid 1000 attnviz
WORKDIR /home/attnviz/app

# PyTorch's CPU wheel first: PyPI's Linux wheel pulls NVIDIA's CUDA libraries (gigabytes) a CPU host never uses.
# requirements.txt then finds torch==2.13.0 installed and adds the rest, attnviz itself included (-e .).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY --chown=attnviz:attnviz . .
RUN pip install -r requirements.txt

USER attnviz
EXPOSE 7860 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['PORT'] + '/_stcore/health', timeout=4)"
CMD ["sh", "-c", "exec python -m attnviz.ui.serve --server.headless true --server.address 0.0.0.0 --server.port ${PORT}"]
