# volcano-guard image: slim Python, non-root, no build tools in the final stage.
# The build stage copies the package whole: tests/packaging/test_packaging.py builds what it copies.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY volcano_guard volcano_guard
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin guard
USER 65532
ENTRYPOINT ["volcano-guard"]
