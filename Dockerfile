# The image installs the wheel a release ships: built from the sources (`python -m build`:
# the sdist, then the wheel from it) in a stage with a C compiler, which compiles the hot
# path with mypyc (setup.py), then installed, not editable, with its dependencies, into a
# slim image without the compiler. Both stages on one Python and one Debian, so that the
# compiled modules load; `docker run --rm sched:local sched version` says "compiled".
FROM python:3.11-bookworm AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . /src
RUN pip install --no-cache-dir build && python -m build --outdir /dist

FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /dist /tmp/dist
RUN pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist

ENTRYPOINT []
CMD ["sched", "--help"]
