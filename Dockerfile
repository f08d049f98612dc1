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
CMD ["gunicorn", "config.wsgi", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
