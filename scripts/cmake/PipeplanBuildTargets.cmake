# Limits `all` to named targets (PIPEPLAN_BUILD_TARGETS in the top
# CMakeLists.txt). Every other library and executable of the project leaves
# `all`; those the named ones link are still built as their dependencies.
# Utility targets (generated sources, checks) stay in `all`.

function(pipeplan_collect_targets dir out)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    pipeplan_collect_targets("${sub}" sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(pipeplan_limit_default_targets wanted)
  foreach(name IN LISTS wanted)
    if(NOT TARGET ${name})
      message(FATAL_ERROR "PIPEPLAN_BUILD_TARGETS names ${name}, which is not a target")
    endif()
  endforeach()
  pipeplan_collect_targets("${PROJECT_SOURCE_DIR}" all_targets)
  set(left 0)
  foreach(target IN LISTS all_targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "UTILITY" OR type STREQUAL "INTERFACE_LIBRARY" OR target IN_LIST wanted)
      continue()
    endif()
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
    math(EXPR left "${left} + 1")
  endforeach()
  message(STATUS "pipeplan: building only ${wanted} by default (${left} targets left out of all)")
endfunction()
