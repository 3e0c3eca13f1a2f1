# Reame, a CPU image: `reame serve` on port 8000, the model from a volume mounted at /models.
# docs/deploy.md#docker says how to build and run it.
#
#   docker build -t reame .
#   docker run -d -p 8000:8000 -v /srv/models:/models:ro -v reame-cache:/cache \
#       --stop-timeout 40 reame /models/model.gguf --threads 4

# ---- build: install Reame from this source tree into a virtualenv ----
FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/reame
WORKDIR /src
# what the package is built from (pyproject.toml's package-dir); README.md is its description
COPY pyproject.toml README.md ./
COPY reame ./reame
COPY codegen ./codegen
COPY templates ./templates
# the hub extra: `reame serve org/repo:QUANT` downloads into /cache/huggingface
RUN /opt/reame/bin/pip install '.[hub]'

# ---- run: the virtualenv alone, as a user without privileges ----
FROM python:3.11-slim

RUN groupadd --system --gid 10001 reame \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin reame \
    && mkdir -p /models /cache \
    && chown 10001:10001 /cache
COPY --from=build /opt/reame /opt/reame

# Writable state lives in /cache: compiled kernels (warm starts in ~0.03 s instead of a compile),
# the adaptive runtime's learned strategies, models downloaded by name.
ENV PATH=/opt/reame/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    REAME_CACHE_DIR=/cache/kernels \
    REAME_ADAPTIVE_DIR=/cache/adaptive \
    HF_HOME=/cache/huggingface \
    REAME_PROGRESS=log
VOLUME ["/cache"]

USER 10001:10001
EXPOSE 8000
# /health is 503 while the model loads (and kernels compile): give it time before counting.
# urlopen raises on anything but a 2xx answer: exit code 1, unhealthy.
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", \
         "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/health', timeout=4)"]

# reame is PID 1: gunicorn's master takes SIGTERM (docker stop) and lets requests in flight
# finish for up to 30 s, hence --stop-timeout 40 above. Keep --port 8000 (the health check
# uses it); publish another port with -p.
ENTRYPOINT ["reame", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["/models/model.gguf"]
