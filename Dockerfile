# kvgate's image: kvgate, kvgate-store and kvgate-sim on Debian 12, run as user 65532.
#   make image                       (podman, buildah or docker, whichever is here)
#   docker build --build-arg KVGATE_GIT_COMMIT=$(git rev-parse --short=12 HEAD) -t IMAGE .
# deploy/ runs the name `make image` gives it (Makefile: IMAGE).

# --- build: the release binaries, installed into /stage (cmake --install) ---
FROM debian:12 AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libboost1.81-dev libabsl-dev prometheus-cpp-dev libyaml-cpp-dev libspdlog-dev \
      libsimdjson-dev libxxhash-dev libzmq3-dev cppzmq-dev libmsgpuck-dev libssl-dev \
      libibverbs-dev librdmacm-dev libonig-dev libutf8proc-dev libhiredis-dev \
      libtcmalloc-minimal4 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The tree is copied without .git (.dockerignore): the commit comes in as an argument.
ARG KVGATE_GIT_COMMIT=unknown
ENV KVGATE_GIT_COMMIT=${KVGATE_GIT_COMMIT}
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVGATE_BUILD_TESTS=OFF \
      -DKVGATE_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX=/usr/local \
    && cmake --build /build --target kvgate kvgate-store kvgate-sim \
    && DESTDIR=/stage cmake --install /build --strip

# --- runtime: the shared libraries those binaries link, nothing else ---
FROM debian:12-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libabsl20220623 libfmt9 libibverbs1 librdmacm1 libonig5 libprometheus-cpp-core1.0 \
      libsimdjson14 libspdlog1.10 libssl3 libutf8proc2 libxxhash0 libyaml-cpp0.7 libzmq5 \
      libhiredis0.14 libtcmalloc-minimal4 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /stage/usr/local/ /usr/local/
# The installed example config; deploy/ mounts its ConfigMap over /etc/kvgate.
COPY --from=build /stage/usr/local/etc/kvgate/kvgate.yaml /etc/kvgate/kvgate.yaml
USER 65532:65532
EXPOSE 8000 8001
ENTRYPOINT ["/usr/local/bin/kvgate"]
CMD ["--config", "/etc/kvgate/kvgate.yaml"]
