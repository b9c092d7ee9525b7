# The image the chart runs, for people with Docker and a registry: every console script, non-root.
#   docker build -t <registry>/foo-operator:0.1.0 . && docker push <registry>/foo-operator:0.1.0
# Without Docker or a registry, `make image` (hack/image.sh) builds a smaller one from Debian's
# python3 with mmdebstrap and buildah: no shell, no pip (docs/real-node.md).
# PYTHON_IMAGE: any image with python >= 3.11 and pip, e.g. a mirror of python:3.11-slim.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fooapi fooapi
COPY kube kube
COPY certs certs
COPY webhook webhook
COPY insights insights
COPY controller controller
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[fast]'

FROM ${PYTHON_IMAGE}
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --compile /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["foo-operator-webhook"]
