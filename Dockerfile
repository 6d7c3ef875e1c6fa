# syntax=docker/dockerfile:1
#
# engage: built on Debian bookworm with the locked dependencies, run on bookworm-slim as a
# user of its own, in production mode. `docker build -t engage .`; compose.yaml runs two
# instances behind nginx.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The cache mounts keep the registry and compiled dependencies between builds; the binary
# is copied out of the target directory within the same step, since the mount is not part
# of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin engage \
    && install -m 0755 target/release/engage /usr/local/bin/engage

FROM debian:bookworm-slim
# The system's roots, for rediss:// and PostgreSQL over TLS.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/engage --create-home \
    --shell /usr/sbin/nologin engage
COPY --from=build /usr/local/bin/engage /usr/local/bin/engage

# Production mode refuses to start without ENGAGE_JWT_SECRET or ENGAGE_JWT_JWKS_URL: the
# image carries no secret, the deployment passes one. DATABASE_URL defaults to SQLite in
# the volume; set it to postgres://… for more than one instance. /metrics is served on a
# port of its own (9100), for the monitoring network only.
ENV ENGAGE_ENV=production \
    ENGAGE_BIND=0.0.0.0:8000 \
    ENGAGE_METRICS_BIND=0.0.0.0:9100 \
    DATABASE_URL=sqlite:///var/lib/engage/engage.db
USER engage
WORKDIR /var/lib/engage
VOLUME ["/var/lib/engage"]
EXPOSE 8000 9100
# engage drains on SIGTERM (ENGAGE_DRAIN_SECONDS, then up to ENGAGE_SHUTDOWN_GRACE_SECONDS):
# give it at least their sum before the kill (`docker stop -t 30`, compose's
# stop_grace_period). No HEALTHCHECK: the image has no HTTP client, and orchestrators probe
# /healthz (alive) and /readyz (in rotation) themselves.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/engage"]
CMD ["serve"]
