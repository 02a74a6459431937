# idemgate gateway image. Build: docker build -t idemgate .
# Configuration: /etc/idemgate/gateway.toml (mount it; set listen = "0.0.0.0:8080" and
# admin_listen = "0.0.0.0:9090" so the ports are reachable from outside the container).
# Records (SQLite default): /var/lib/idemgate (mount a volume).

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo install --locked --path crates/idemgate-gateway --root /out

FROM debian:bookworm-slim
# CA roots for https:// upstreams.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home-dir /var/lib/idemgate --create-home idemgate
COPY --from=build /out/bin/idemgate /usr/local/bin/idemgate
USER idemgate
WORKDIR /var/lib/idemgate
VOLUME /var/lib/idemgate
EXPOSE 8080 9090
# SIGTERM drains: operations in flight finish (up to upstream_timeout + 5 s).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/idemgate"]
CMD ["serve", "--config", "/etc/idemgate/gateway.toml"]
