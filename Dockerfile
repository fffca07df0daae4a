# syntax=docker/dockerfile:1
# Build a static ferry binary, then ship it alone on a distroless base,
# running as a non-root user.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ferry ./cmd/ferry

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ferry /usr/local/bin/ferry
USER nonroot:nonroot
EXPOSE 8080
ENV FERRY_LISTEN=:8080
ENTRYPOINT ["/usr/local/bin/ferry"]
CMD ["serve"]
