# One image for web, workers and beat (docker-compose.yml picks the command).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=config.settings.production

RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 gpulab

WORKDIR /app
# WORKDIR makes /app as root and COPY --chown does not change an existing directory: beat
# writes its schedule file here, as uid 1000.
RUN chown gpulab:gpulab /app
COPY requirements.txt .
RUN pip install -r requirements.txt
COPY --chown=gpulab:gpulab . .
# collectstatic needs a secret key to import production settings; it is not used at runtime.
RUN DJANGO_SECRET_KEY=build-only-not-a-secret-collectstatic-needs-some-key-of-50-chars \
    python manage.py collectstatic --noinput

USER gpulab
EXPOSE 8000
# Threaded workers: a request waiting on a node (the job page's log read over SSH, up to
# 5 steps of 5 s against a hung node) holds one of 4 threads, not a whole worker, so agents'
# heartbeats (5 s to answer) still get through. --timeout is the worker's own liveness, well
# above that worst case. docker-compose.yml's `web` runs the same command.
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--worker-class", "gthread", "--threads", "4", "--timeout", "60", "--access-logfile", "-"]
