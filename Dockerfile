# edge in a container: a static binary on a distroless base, run as non-root.
#   docker build -t edge .
#   docker run -p 8080:8080 edge
# The data listener serves 0.0.0.0:8080 inside the container; the admin
# listener (/healthz, /readyz, /metrics, the dashboard) stays on the
# container's loopback, where the health check reaches it. To publish the
# admin port, give it a token: --admin-listen 0.0.0.0:9090 --admin-token FILE.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/edge ./cmd/edge

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edge /usr/local/bin/edge
USER nonroot:nonroot
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
	CMD ["/usr/local/bin/edge", "health", "127.0.0.1:9090"]
ENTRYPOINT ["/usr/local/bin/edge"]
CMD ["--listen", "0.0.0.0:8080", "--admin-listen", "127.0.0.1:9090"]
