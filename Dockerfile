# wavegate's image: one static binary on distroless, non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY certs/ certs/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w" -o /wavegate ./cmd/wavegate

FROM gcr.io/distroless/static:nonroot
COPY --from=build /wavegate /wavegate
USER 65532:65532
ENTRYPOINT ["/wavegate"]
CMD ["manager"]
