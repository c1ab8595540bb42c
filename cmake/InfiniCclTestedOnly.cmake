# INFINI_CCL_TESTED_ONLY=ON (CI's sanitizer builds): `all` builds what this
# build's tests need and nothing else. Every program that is not a test
# (tools, ccl_conformance, helpers) and every library of ours is left out of
# `all`; one that a test links or names in add_dependencies is still built
# through that test. Plugins (MODULE libraries) stay: a test may load one by
# path without naming it. Included last, once every target exists.
if(NOT INFINI_CCL_TESTED_ONLY)
  return()
endif()
if(NOT INFINI_CCL_BUILD_TESTS)
  message(FATAL_ERROR "INFINI_CCL_TESTED_ONLY=ON needs INFINI_CCL_BUILD_TESTS=ON "
                      "(it builds what the tests need)")
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
    # A test program links gtest; its tests are what ctest runs.
    get_target_property(links ${target} LINK_LIBRARIES)
    if(links MATCHES "GTest::")
      continue()
    endif()
  elseif(NOT type STREQUAL "STATIC_LIBRARY" AND NOT type STREQUAL "SHARED_LIBRARY")
    continue()
  endif()
  set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  list(APPEND infini_ccl_left_out ${target})
endforeach()
list(LENGTH infini_ccl_left_out infini_ccl_left_out_count)
message(STATUS "INFINI_CCL_TESTED_ONLY: ${infini_ccl_left_out_count} programs and libraries "
               "are built only where a test needs them")
