# rlctl-enforcer, the rate-limit sidecar, with the rlctl CLI beside it.
#
#   docker build -t rlctl-enforcer --build-arg VERSION=$(git describe --tags --always --dirty) .
#   docker run --rm -v "$PWD/out:/etc/rlctl:ro" -p 8081:8081 -p 6070:6070 \
#     rlctl-enforcer --config /etc/rlctl/snapshot.json
#
# The enforcer listens on loopback by default. In a container that would make it unreachable,
# so the image sets the environment twins of --grpc-addr and --admin-addr to all interfaces;
# a flag on the command line still wins. deploy/deploy_test.go checks this file against the
# enforcer's defaults.

# The build stage: static binaries, no cgo, paths trimmed, the version stamped as `make` does.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/rlctl-enforcer ./cmd/rlctl

# The final stage: nothing but the binaries and the CA certificates (for TLS to Redis).
FROM scratch
ARG VERSION=dev
ARG SOURCE=
LABEL org.opencontainers.image.title="rlctl-enforcer" \
      org.opencontainers.image.description="Rate-limit sidecar: Envoy's Rate Limit Service (RLS v3) enforcing an rlctl policy snapshot, with the rlctl CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/rlctl-enforcer /out/rlctl /usr/local/bin/
ENV RLCTL_ENFORCER_GRPC_ADDR=0.0.0.0:8081 \
    RLCTL_ENFORCER_ADMIN_ADDR=0.0.0.0:6070
# gRPC (RLS v3, health, reflection), then admin HTTP (/metrics, /healthz, /readyz, /config).
EXPOSE 8081 6070
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rlctl-enforcer"]
