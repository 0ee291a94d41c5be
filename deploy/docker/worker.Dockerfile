# pipeplan-worker image, built from the Debian package (docs/install.md,
# "Container images"):
#
#   cmake --build build && (cd build && cpack -G DEB)
#   docker build -f deploy/docker/worker.Dockerfile -t pipeplan-worker:0.1.0 build/packages
#
# A package built without NCCL (-DPIPEPLAN_WITH_NCCL=OFF) runs on debian:12
# as it is (Gloo; --transport auto picks it). A package built with NCCL links
# the CUDA runtime and NCCL of the build machine, which no Debian package
# provides: pass a BASE image that has them for Debian 12 (for example one
# with NVIDIA's debian12 CUDA repository installed).
ARG BASE=debian:12
FROM ${BASE}

COPY pipeplan-worker_*.deb /tmp/debs/
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/debs/pipeplan-worker_*.deb \
 && rm -rf /var/lib/apt/lists/* /tmp/debs

USER 65532:65532
EXPOSE 7611
ENTRYPOINT ["/usr/bin/pipeplan-worker"]
