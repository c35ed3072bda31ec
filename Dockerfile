# Weir in a container: the `weir` binary plus the demo site.
#   docker build -t weir .
#   docker run --rm -p 8080:8080 weir            # the demo site
#   docker run --rm -p 8080:8080 -v $PWD/weir.toml:/etc/weir.toml weir serve --config /etc/weir.toml
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p weir

FROM debian:bookworm-slim
COPY --from=build /src/target/release/weir /usr/local/bin/weir
COPY config /srv/weir/config
COPY fixtures /srv/weir/fixtures
WORKDIR /srv/weir
EXPOSE 8080
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/weir"]
CMD ["serve", "--config", "/srv/weir/config/docker.toml"]
