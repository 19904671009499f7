# BertScope as a container (Hugging Face Spaces, any Docker host). CPU build by default:
#   docker build -t bertscope . && docker run -p 8501:8501 bertscope
# GPU build (host with the NVIDIA container toolkit): take torch's CUDA wheels instead:
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 -t bertscope:gpu .
#   docker run --gpus all -p 8501:8501 bertscope:gpu
# bertviz's three scripts (require.js, d3, jQuery) from npm, served by the app: no CDN at run time
FROM node:20-slim AS bertviz-assets
WORKDIR /assets
RUN npm pack requirejs@2.3.6 d3@5.7.0 jquery@2.2.4 \
    && tar -xzf requirejs-2.3.6.tgz --strip-components=1 package/require.js \
    && tar -xzf d3-5.7.0.tgz --strip-components=2 package/dist/d3.min.js \
    && tar -xzf jquery-2.2.4.tgz --strip-components=2 package/dist/jquery.min.js \
    && rm ./*.tgz

FROM python:3.11-slim

ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# Hosted by default: allowlisted models, input caps (see README, "Sharing and hosting").
# Behind one proxy (Spaces' front end, or an nginx that appends $remote_addr to X-Forwarded-For): a visitor is the
# entry that proxy wrote, the rightmost, never one the visitor wrote (docs/hosting.md); what the demo writes for its
# visitors stays within 2 GiB on disk.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    BERTSCOPE_DEMO=1 \
    BERTSCOPE_VISITOR_HEADER=X-Forwarded-For \
    BERTSCOPE_TRUSTED_PROXIES=1 \
    BERTSCOPE_DISK_MB=2048 \
    HF_HOME=/home/app/.cache/huggingface

# Spaces run containers as uid 1000
RUN useradd --create-home --uid 1000 app
WORKDIR /home/app/bertscope

COPY requirements.txt .
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.13.0 \
    && pip install --no-cache-dir -r requirements.txt

COPY --chown=1000:1000 app.py ./
COPY --chown=1000:1000 bertscope ./bertscope
COPY --chown=1000:1000 .streamlit ./.streamlit
COPY --chown=1000:1000 --from=bertviz-assets /assets ./static/bertviz
USER 1000:1000

EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]
CMD ["python", "-m", "streamlit", "run", "app.py", "--server.port=8501", "--server.address=0.0.0.0", "--browser.serverAddress=localhost"]
