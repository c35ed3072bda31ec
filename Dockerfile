# Weir in a container: the `weir` binary plus the demo site.
#   docker build -t weir .
#   docker run --rm -p 8080:8080 weir            # the demo site
#   docker run --rm -p 8080:8080 -v $PWD/weir.toml:/etc/weir.toml weir serve --config /etc/weir.toml
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# No debug info in the image's binary (the workspace keeps line tables for
# profiling), and symbols stripped: a smaller image, nothing else changes.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo build --release --locked -p weir

FROM debian:bookworm-slim
# A user of its own, so Weir never runs as root (it listens on 8080, no
# privileged port). ca-certificates: the system CA bundle, for an
# `[upstream.tls] ca = "/etc/ssl/certs/ca-certificates.crt"` (without `ca`
# Weir uses the Mozilla roots it carries).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin weir
COPY --from=build /src/target/release/weir /usr/local/bin/weir
COPY config /srv/weir/config
COPY fixtures /srv/weir/fixtures
WORKDIR /srv/weir
USER weir
EXPOSE 8080
STOPSIGNAL SIGTERM
# The admin listener's /healthz on the container's loopback (config/docker.toml
# keeps [admin] at its default, 127.0.0.1:9901), read with bash alone: the
# slim image has no curl. 503 while draining, so a stopping container is
# unhealthy at once.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/weir"]
CMD ["serve", "--config", "/srv/weir/config/docker.toml"]
