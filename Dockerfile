# The image the chart runs: both console scripts, non-root, nothing else.
#   docker build -t <registry>/foo-operator:0.1.0 . && docker push <registry>/foo-operator:0.1.0
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fooapi fooapi
COPY kube kube
COPY certs certs
COPY webhook webhook
COPY controller controller
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[fast]'

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["foo-operator-webhook"]
