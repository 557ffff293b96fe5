# loomgate image: a static binary on distroless, running as a non-root user.
#
#   docker build -t loomgate \
#     --build-arg VERSION="$(git describe --tags --always)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" .
#   docker run -p 8080:8080 -p 9090:9090 \
#     --add-host=host.docker.internal:host-gateway \
#     -e LOOMGATE_UPSTREAM=http://host.docker.internal:8081 loomgate
#
# host.docker.internal is the host, where the service listens on 8081;
# Docker Desktop defines it, Docker on Linux only with that --add-host.
# The service must listen on an address the container reaches (0.0.0.0,
# not 127.0.0.1).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first: a source change then reuses the downloaded-modules layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/loomgate ./cmd/loomgate

# static-debian12 has no shell and no libc; CA certificates and tzdata only.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/loomgate /loomgate
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# LOOMGATE_LISTEN (traffic) and LOOMGATE_ADMIN_LISTEN (metrics, health, advice).
EXPOSE 8080 9090
ENTRYPOINT ["/loomgate"]
