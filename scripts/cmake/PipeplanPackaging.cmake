# Debian packages, one per install component (PipeplanInstall.cmake):
#
#   cd build && cpack -G DEB      # -> build/packages/*.deb
#
#   pipeplan-cli       the `pipeplan` command
#   pipeplan-planner   the planner daemon, its systemd unit, /etc/pipeplan/planner.env
#   pipeplan-worker    the worker daemon, its systemd unit template, worker.env
#   libpipeplan-dev    headers, static libraries, .proto files, CMake package, pipeplan.pc
#   python3-pipeplan   the Python client and exporter
#
# Packages install under /usr. Depends of the binaries come from
# dpkg-shlibdeps; libraries that no Debian package provides (a CUDA toolkit
# in /usr/local/cuda) give none, so a package built with NCCL needs the
# CUDA runtime on the target (docs/install.md).
set(PIPEPLAN_PACKAGE_MAINTAINER "pipeplan developers <pipeplan@localhost>" CACHE STRING
    "Maintainer field of the Debian packages")

set(CPACK_PACKAGE_NAME pipeplan)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "plans and runs pipeline-parallel training")
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli planner worker dev python)
# Install with DESTDIR and prefix /usr, so the install-time rules see the
# real prefix and put configuration in /etc.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Binaries without debug info (static libraries keep their symbols).
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${PIPEPLAN_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

set(CPACK_DEBIAN_CLI_PACKAGE_NAME pipeplan-cli)
set(CPACK_COMPONENT_CLI_DESCRIPTION
    "pipeplan command line tool\n plan and simulate pipeline-parallel training in-process, and manage\n the jobs of a pipeplan planner (`pipeplan --help`).")

set(CPACK_DEBIAN_PLANNER_PACKAGE_NAME pipeplan-planner)
set(CPACK_DEBIAN_PLANNER_PACKAGE_RECOMMENDS pipeplan-cli)
set(CPACK_DEBIAN_PLANNER_PACKAGE_DEPENDS "adduser")
set(CPACK_COMPONENT_PLANNER_DESCRIPTION
    "pipeplan planner service\n The gRPC service that plans pipeline-parallel training and keeps jobs\n with versioned plans; systemd unit pipeplan-planner.service.")

set(CPACK_DEBIAN_WORKER_PACKAGE_NAME pipeplan-worker)
# python3-pipeplan has the stage compiler of --executor torch.
set(CPACK_DEBIAN_WORKER_PACKAGE_RECOMMENDS "pipeplan-cli, python3-pipeplan")
# libgloo0 ships /usr/lib/libgloo.so.0, which dpkg-shlibdeps does not match
# through the merged /lib path.
set(CPACK_DEBIAN_WORKER_PACKAGE_DEPENDS "adduser, libgloo0")
set(CPACK_COMPONENT_WORKER_DESCRIPTION
    "pipeplan worker daemon\n Runs one rank of a pipeplan job's plan (Gloo or NCCL); systemd unit\n template pipeplan-worker@.service, one instance per GPU.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libpipeplan-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libgrpc++-dev, libprotobuf-dev, libabsl-dev, coinor-libcbc-dev, pkgconf | pkg-config")
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "pipeplan C++ client and planning core (development files)\n find_package(pipeplan CONFIG) gives pipeplan::client, pipeplan::core and\n pipeplan::convert; pkg-config pipeplan; the pipeplan.v1 .proto files.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-pipeplan)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3, python3-grpcio, python3-protobuf")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
    "pipeplan Python client and PyTorch exporter\n import pipeplan: a client of the planner service and the torch.fx\n exporter (the exporter needs python3-torch).")

# Maintainer scripts and conffiles of the two daemons.
foreach(daemon planner worker)
  string(TOUPPER ${daemon} upper)
  set(control ${PROJECT_BINARY_DIR}/debian/${daemon})
  file(MAKE_DIRECTORY ${control})
  file(WRITE ${control}/conffiles "/etc/pipeplan/${daemon}.env\n")
  foreach(script postinst postrm)
    file(COPY ${PROJECT_SOURCE_DIR}/deploy/debian/${script} DESTINATION ${control}
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                          WORLD_READ WORLD_EXECUTE)
  endforeach()
  set(CPACK_DEBIAN_${upper}_PACKAGE_CONTROL_EXTRA
      "${control}/conffiles;${control}/postinst;${control}/postrm")
endforeach()

include(CPack)
