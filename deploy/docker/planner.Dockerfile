# pipeplan-planner image, built from the Debian package (docs/install.md,
# "Container images"). Build the packages first, then use their folder as the
# context:
#
#   cmake --build build && (cd build && cpack -G DEB)
#   docker build -f deploy/docker/planner.Dockerfile -t pipeplan-planner:0.1.0 build/packages
#
# deploy/k8s runs it as uid 65532 with the state directory on a volume.
FROM debian:12

COPY pipeplan-planner_*.deb /tmp/debs/
# apt resolves the package's Depends (gRPC, protobuf, Abseil, CBC, SQLite,
# prometheus-cpp) from Debian. The postinst makes a bearer token for the
# systemd unit: an image must not carry one (Kubernetes mounts its own).
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/debs/pipeplan-planner_*.deb \
 && rm -f /etc/pipeplan/planner-token \
 && rm -rf /var/lib/apt/lists/* /tmp/debs

USER 65532:65532
EXPOSE 7600 7601
ENTRYPOINT ["/usr/bin/pipeplan-planner"]
CMD ["--listen=0.0.0.0:7600", "--metrics-listen=0.0.0.0:7601", "--data-dir=/var/lib/pipeplan"]
