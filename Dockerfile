# For people with Docker. Without a Docker daemon, `make image` writes the same kind of image
# (static binary, one layer, uid 65532) as an OCI archive.
FROM rust:1-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p app-operator \
 && cp target/release/app-operator /app-operator

FROM gcr.io/distroless/static:nonroot
COPY --from=build /app-operator /app-operator
USER 65532:65532
ENTRYPOINT ["/app-operator"]
CMD ["run"]
