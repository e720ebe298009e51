# volcano-guard image: slim Python, non-root, no build tools in the final stage.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY volcano_guard volcano_guard
COPY webhook webhook
COPY sidecar sidecar
COPY certs certs
COPY sandbox sandbox
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin guard
USER 65532
ENTRYPOINT ["volcano-guard"]
