# Precompiled headers for the heavy headers most translation units parse
# (PIPEPLAN_PCH in the top CMakeLists.txt). gRPC's and the generated
# pipeplan.v1 headers cost ~4 s of every TU that includes them, GoogleTest
# and gMock ~2 s; on the 2-core CI machine that was most of the build. Three
# shared headers, each compiled once and reused by every target that fits:
#   pipeplan_pch_grpc        targets that compile against pipeplan_proto
#   pipeplan_pch_test        GoogleTest binaries without pipeplan_proto
#   pipeplan_pch_test_grpc   GoogleTest binaries with pipeplan_proto
# A target whose compile line sees LibTorch (its include path carries a CUDA
# wheel's older protobuf headers) never gets one; nor do the generated proto
# libraries (-fPIC, -w) or the libFuzzer binaries (-fsanitize=fuzzer), whose
# flags a shared header would have to match.

set(pipeplan_pch_std <algorithm> <atomic> <chrono> <cstdint> <filesystem> <fstream>
    <functional> <map> <memory> <optional> <set> <sstream> <string> <thread> <utility>
    <vector>)
set(pipeplan_pch_absl <absl/container/flat_hash_map.h> <absl/status/status.h>
    <absl/status/statusor.h> <absl/strings/str_cat.h> <absl/strings/str_format.h>
    <absl/synchronization/mutex.h> <absl/time/time.h>)
set(pipeplan_pch_grpc_headers <grpcpp/grpcpp.h> <pipeplan/v1/planner_service.grpc.pb.h>
    <pipeplan/v1/model_package.pb.h> <google/protobuf/util/json_util.h>)
set(pipeplan_pch_test_headers <gtest/gtest.h> <gmock/gmock.h>)

# pipeplan_pch_library(name HEADERS ... LIBS ...): an object library whose
# only job is to compile one precompiled header for others to reuse.
function(pipeplan_pch_library name)
  cmake_parse_arguments(P "" "" "HEADERS;LIBS" ${ARGN})
  set(stub ${PROJECT_BINARY_DIR}/pch/${name}.cc)
  file(WRITE ${stub}.in "// The precompiled header's own translation unit: nothing else.\n")
  configure_file(${stub}.in ${stub} COPYONLY)
  add_library(${name} OBJECT ${stub})
  target_link_libraries(${name} PRIVATE ${P_LIBS} Threads::Threads)
  # -pthread defines _REENTRANT, which a GCC precompiled header must agree
  # on with each user: always on, here and in every user.
  target_compile_options(${name} PRIVATE -pthread)
  target_precompile_headers(${name} PRIVATE ${P_HEADERS})
  # The tests' headers compile with the tests' own options (-O1).
  if(name MATCHES "_test")
    target_compile_options(${name} PRIVATE ${PIPEPLAN_TEST_COMPILE_OPTIONS})
  endif()
endfunction()

# The targets whose usage requirements compile `target`: its own link
# libraries and, transitively, their INTERFACE_LINK_LIBRARIES (not the
# link-only ones, whose headers the target does not see).
function(pipeplan_compile_closure target out)
  get_target_property(queue ${target} LINK_LIBRARIES)
  if(NOT queue)
    set(queue "")
  endif()
  set(seen "")
  while(queue)
    list(POP_FRONT queue item)
    if(item MATCHES "^\\$<LINK_ONLY:")
      continue()
    endif()
    string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" item "${item}")
    if(NOT TARGET "${item}")
      continue()
    endif()
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      set(item ${aliased})
    endif()
    if(item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${item})
    get_target_property(iface ${item} INTERFACE_LINK_LIBRARIES)
    if(iface)
      list(APPEND queue ${iface})
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Which shared header `target` takes, or "" for none.
function(pipeplan_pch_choice target out)
  set(${out} "" PARENT_SCOPE)
  get_target_property(type ${target} TYPE)
  get_target_property(imported ${target} IMPORTED)
  get_target_property(own ${target} PRECOMPILE_HEADERS)
  get_target_property(reuse ${target} PRECOMPILE_HEADERS_REUSE_FROM)
  get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
  get_target_property(options ${target} COMPILE_OPTIONS)
  # COMPILE_OPTIONS starts as the directory's warning flags; only a target's
  # own -w or -fsanitize=fuzzer sets it apart.
  if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$"
     OR imported OR own OR reuse OR pic OR options MATCHES "(^|;)(-w|-fsanitize=fuzzer)(;|$)"
     OR target MATCHES "^pipeplan_pch_")
    return()
  endif()
  pipeplan_compile_closure(${target} closure)
  foreach(torch_library IN LISTS TORCH_LIBRARIES)
    if(TARGET "${torch_library}" AND torch_library IN_LIST closure)
      return()
    endif()
  endforeach()
  set(grpc OFF)
  if("pipeplan_proto" IN_LIST closure)
    set(grpc ON)
  endif()
  if("GTest::gtest" IN_LIST closure AND grpc)
    set(${out} pipeplan_pch_test_grpc PARENT_SCOPE)
  elseif("GTest::gtest" IN_LIST closure)
    set(${out} pipeplan_pch_test PARENT_SCOPE)
  elseif(grpc)
    set(${out} pipeplan_pch_grpc PARENT_SCOPE)
  endif()
endfunction()

# Gives every target of the project the shared header that fits it.
function(pipeplan_add_precompiled_headers)
  set(absl_libs absl::status absl::statusor absl::strings absl::str_format
      absl::synchronization absl::time absl::flat_hash_map)
  set(test_libs GTest::gtest GTest::gmock)
  pipeplan_pch_library(pipeplan_pch_grpc
    HEADERS ${pipeplan_pch_std} ${pipeplan_pch_absl} ${pipeplan_pch_grpc_headers}
    LIBS pipeplan_proto ${absl_libs})
  pipeplan_pch_library(pipeplan_pch_test
    HEADERS ${pipeplan_pch_std} ${pipeplan_pch_absl} ${pipeplan_pch_test_headers}
    LIBS ${absl_libs} ${test_libs})
  pipeplan_pch_library(pipeplan_pch_test_grpc
    HEADERS ${pipeplan_pch_std} ${pipeplan_pch_absl} ${pipeplan_pch_grpc_headers}
            ${pipeplan_pch_test_headers}
    LIBS pipeplan_proto ${absl_libs} ${test_libs})
  pipeplan_collect_targets("${PROJECT_SOURCE_DIR}" targets)
  set(counts "")
  foreach(target IN LISTS targets)
    pipeplan_pch_choice(${target} pch)
    if(pch)
      # The shared header was compiled with -pthread; a user must match it.
      target_link_libraries(${target} PRIVATE Threads::Threads)
      target_compile_options(${target} PRIVATE -pthread)
      target_precompile_headers(${target} REUSE_FROM ${pch})
      # GCC 12's object-bounds warnings (-Warray-bounds, -Wstringop-*,
      # -Wrestrict) rest on inlining decisions that the headers' order
      # shifts: with the shared header in front they flagged std::string
      # internals (server.cc's BearerToken, plan_table.cc's memcpy in
      # char_traits.h), GCC's known false positives on std::string at -O2.
      # Warnings here; the build without precompiled headers
      # (PIPEPLAN_PCH=OFF, ccache) keeps them errors.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        target_compile_options(${target} PRIVATE -Wno-error=stringop-overread
          -Wno-error=stringop-overflow -Wno-error=array-bounds -Wno-error=restrict)
      endif()
      list(APPEND counts ${pch})
    endif()
  endforeach()
  set(summary "")
  foreach(pch pipeplan_pch_grpc pipeplan_pch_test pipeplan_pch_test_grpc)
    set(n 0)
    foreach(used IN LISTS counts)
      if(used STREQUAL pch)
        math(EXPR n "${n} + 1")
      endif()
    endforeach()
    string(APPEND summary " ${pch} ${n},")
  endforeach()
  message(STATUS "pipeplan: targets per precompiled header:${summary}")
endfunction()
