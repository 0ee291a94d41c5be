# Install rules (docs/install.md). Components, one per Debian package:
#   cli      bin/pipeplan
#   planner  bin/pipeplan-planner, its systemd unit and /etc/pipeplan/planner.env
#   worker   bin/pipeplan-worker, its systemd unit template and worker.env
#   dev      the libraries a consumer links, public headers, .proto files, the
#            CMake package (pipeplan::client, pipeplan::core, pipeplan::convert)
#            and pipeplan.pc
#   python   the `pipeplan` Python package with its generated pipeplan.v1 modules
# Paths that depend on where things land (units' ExecStart, /etc) are decided
# at install time, so `cmake --install build --prefix P` and the packages
# (prefix /usr) both get them right.
include(CMakePackageConfigHelpers)

set(PIPEPLAN_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pipeplan)
set(PIPEPLAN_PYTHON_INSTALL_DIR lib/python3/dist-packages)

# --- Libraries: a consumer names pipeplan::client / pipeplan::core /
# pipeplan::convert; the others come along as their link dependencies.
set(pipeplan_exported_targets pipeplan_client pipeplan_convert pipeplan_core pipeplan_schedule
    pipeplan_proto pipeplan_health_proto pipeplan_grpc_status pipeplan_base)
foreach(target ${pipeplan_exported_targets})
  string(REPLACE "pipeplan_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  add_library(pipeplan::${export_name} ALIAS ${target})
endforeach()
install(TARGETS ${pipeplan_exported_targets} EXPORT pipeplanTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(EXPORT pipeplanTargets NAMESPACE pipeplan:: DESTINATION ${PIPEPLAN_CMAKE_INSTALL_DIR}
  COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/scripts/cmake/pipeplanConfig.cmake.in
  ${PROJECT_BINARY_DIR}/pipeplanConfig.cmake INSTALL_DESTINATION ${PIPEPLAN_CMAKE_INSTALL_DIR})
# 0.x: a minor version may break the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pipeplanConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pipeplanConfig.cmake
              ${PROJECT_BINARY_DIR}/pipeplanConfigVersion.cmake
  DESTINATION ${PIPEPLAN_CMAKE_INSTALL_DIR} COMPONENT dev)

# pipeplan.pc finds its prefix from its own location (${pcfiledir}), so the
# same file works wherever the tree is installed.
file(RELATIVE_PATH PIPEPLAN_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/scripts/cmake/pipeplan.pc.in ${PROJECT_BINARY_DIR}/pipeplan.pc
  @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pipeplan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT dev)

# --- Public headers: the client, the core (and its schedule library), the
# wire <-> core conversion, the generated pipeplan.v1 headers, and the
# .proto files beside them (protoc -I <prefix>/include).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/common/include/ ${PROJECT_SOURCE_DIR}/client/include/ ${PROJECT_SOURCE_DIR}/planner_service/core/include/
                  ${PROJECT_SOURCE_DIR}/planner_service/convert/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/gen/pipeplan/v1
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pipeplan COMPONENT dev FILES_MATCHING PATTERN "*.pb.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/pipeplan/v1
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pipeplan COMPONENT dev FILES_MATCHING PATTERN "*.proto")

# --- Binaries.
install(TARGETS pipeplan RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(TARGETS pipeplan-planner RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT planner)
install(TARGETS pipeplan-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT worker)

# --- systemd units and default configuration (deploy/systemd). The units
# there name /usr/local/bin (a hand install); installed ones name the real
# bindir and docdir. Configuration goes to /etc for prefix /usr, else
# <prefix>/etc.
foreach(daemon planner worker)
  if(daemon STREQUAL "planner")
    set(unit pipeplan-planner.service)
  else()
    set(unit pipeplan-worker@.service)
  endif()
  install(CODE "
    set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/${unit}\" text)
    string(REPLACE \"/usr/local/bin/\" \"\${prefix}/${CMAKE_INSTALL_BINDIR}/\" text \"\${text}\")
    string(REPLACE \"file:///usr/local/share/doc/pipeplan/\"
                   \"file://\${prefix}/${CMAKE_INSTALL_DOCDIR}/\" text \"\${text}\")
    file(WRITE \"${PROJECT_BINARY_DIR}/systemd/${unit}\" \"\${text}\")
    file(INSTALL \"${PROJECT_BINARY_DIR}/systemd/${unit}\"
         DESTINATION \"\${prefix}/lib/systemd/system\")
    if(prefix STREQUAL \"/usr\")
      set(etc /etc/pipeplan)
    else()
      set(etc \"\${prefix}/etc/pipeplan\")
    endif()
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/${daemon}.env.example\" text)
    file(WRITE \"${PROJECT_BINARY_DIR}/systemd/${daemon}.env\" \"\${text}\")
    file(INSTALL \"${PROJECT_BINARY_DIR}/systemd/${daemon}.env\" DESTINATION \"\${etc}\")
    " COMPONENT ${daemon})
endforeach()

# --- Documentation, with the package that needs it.
install(FILES docs/cli.md docs/graph-format.md docs/planning.md docs/schedules.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT cli)
install(FILES docs/service.md docs/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT planner)
install(FILES docs/worker.md docs/model-package.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT worker)
install(FILES docs/install.md docs/architecture.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT dev)
install(FILES docs/python-client.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT python)

# --- Python: the package (with its subpackage pipeplan/export/, the
# exporter), the flat command modules over it, and the generated pipeplan.v1
# modules, in one dist-packages folder.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/client/python/pipeplan
  DESTINATION ${PIPEPLAN_PYTHON_INSTALL_DIR} COMPONENT python
  FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
file(GLOB pipeplan_python_modules ${PROJECT_SOURCE_DIR}/client/python/pipeplan_*.py)
install(FILES ${pipeplan_python_modules} DESTINATION ${PIPEPLAN_PYTHON_INSTALL_DIR}
  COMPONENT python)
if(TARGET pipeplan_python_stubs)
  install(DIRECTORY ${PIPEPLAN_PYTHON_DIR}/pipeplan/v1
    DESTINATION ${PIPEPLAN_PYTHON_INSTALL_DIR}/pipeplan COMPONENT python
    FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "__pycache__" EXCLUDE)
endif()
