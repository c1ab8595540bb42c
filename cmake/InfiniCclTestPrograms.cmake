# What the build does with its test programs, once every target exists
# (included last). A test program is an executable that links gtest.
#
# Their own sources are compiled without optimization (-O0, debug info
# kept) unless INFINI_CCL_OPTIMIZE_TESTS=ON: what they test, our libraries
# and plugins and the programs they start, keeps the build type's flags.
# gtest's and nlohmann::json's templates compile much faster without the
# optimizer: the 108 test sources of a full build took 557 s of CPU at -O2,
# 328 s at -O0, and the main suite ran as fast (458 s at -O0, 481 s at -O2).
#
# INFINI_CCL_TESTED_ONLY=ON (CI's sanitizer builds): `all` builds what this
# build's tests need and nothing else. Every program that is not a test
# (tools, ccl_conformance, helpers) and every library of ours is left out of
# `all`; one that a test links or names in add_dependencies is still built
# through that test. Plugins (MODULE libraries) stay: a test may load one by
# path without naming it.
if(NOT INFINI_CCL_BUILD_TESTS)
  if(INFINI_CCL_TESTED_ONLY)
    message(FATAL_ERROR "INFINI_CCL_TESTED_ONLY=ON needs INFINI_CCL_BUILD_TESTS=ON "
                        "(it builds what the tests need)")
  endif()
  return()
endif()

# infini_ccl_targets_under(<directory> <out>): the targets defined in
# <directory> and the folders below it.
function(infini_ccl_targets_under directory out)
  get_property(targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirectories DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    infini_ccl_targets_under(${subdirectory} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

infini_ccl_targets_under(${PROJECT_SOURCE_DIR} infini_ccl_all_targets)
set(infini_ccl_left_out "")
foreach(target IN LISTS infini_ccl_all_targets)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    get_target_property(links ${target} LINK_LIBRARIES)
    if(links MATCHES "GTest::")
      if(NOT INFINI_CCL_OPTIMIZE_TESTS)
        # After the build type's -O2 on the command line, so it wins (C++ only:
        # CUDA sources keep their flags).
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O0>)
      endif()
      continue()
    endif()
  elseif(NOT type STREQUAL "STATIC_LIBRARY" AND NOT type STREQUAL "SHARED_LIBRARY")
    continue()
  endif()
  if(INFINI_CCL_TESTED_ONLY)
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    list(APPEND infini_ccl_left_out ${target})
  endif()
endforeach()
if(INFINI_CCL_TESTED_ONLY)
  list(LENGTH infini_ccl_left_out infini_ccl_left_out_count)
  message(STATUS "INFINI_CCL_TESTED_ONLY: ${infini_ccl_left_out_count} programs and libraries "
                 "are built only where a test needs them")
endif()
