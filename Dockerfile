# gobrave's image, for deploy/kubernetes/ (docs/kubernetes.md, "Deploying gobrave on
# Kubernetes"): the checkout at /app, its dependencies installed, run as an unprivileged
# user (uid/gid 10001, the runAsUser of the manifests). Nothing is written inside the image
# at run time: the manifests mount /app/var and /tmp (readOnlyRootFilesystem).
#   docker build -t registry.example.org/gobrave:0.1.0 .
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir -e . \
    && groupadd --system --gid 10001 gobrave \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home gobrave
USER 10001:10001
EXPOSE 8000
CMD ["python", "-m", "gunicorn", "gobrave.asgi:application", "--worker-class", "uvicorn_worker.UvicornWorker", "--bind", "0.0.0.0:8000", "--workers", "2", "--graceful-timeout", "20", "--control-socket", "var/gunicorn.ctl"]
