# The image for people with Docker or Podman and a registry: every console script (the kubectl
# plugin's included), non-root.
#   docker build -t <registry>/foo-operator:0.2.0 . && docker push <registry>/foo-operator:0.2.0
# Releases publish a smaller image built without Docker (hack/image.sh: Debian's python3 with
# mmdebstrap and buildah, no shell, no pip; docs/install.md). Both run the same wheels.
# PYTHON_IMAGE: any image with python >= 3.11 and pip, e.g. a mirror of python:3.11-slim.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY apimachinery apimachinery
COPY componentbase componentbase
COPY fooapi fooapi
COPY kube kube
COPY serving serving
COPY certs certs
COPY webhook webhook
COPY insights insights
COPY controller controller
COPY kubectl_foo kubectl_foo
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[fast]'

FROM ${PYTHON_IMAGE}
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --compile /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["foo-operator-webhook"]
