# Warnings are errors in our own code. Third-party headers come from system
# include directories, so their warnings do not count.
add_library(infini_ccl_warnings INTERFACE)
target_compile_options(infini_ccl_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wshadow -Wnon-virtual-dtor
                            -Wno-error=deprecated-declarations>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Werror>)
# GCC 12 at -O3 reports -Wrestrict inside libstdc++'s std::string operator+
# for ordinary concatenations (GCC bug 105329, fixed in GCC 13).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(infini_ccl_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()

# Sanitizers apply to everything we build, so a plugin loaded by a sanitized
# test is instrumented too.
if(INFINI_CCL_SANITIZER STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(INFINI_CCL_SANITIZER STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT INFINI_CCL_SANITIZER STREQUAL "")
  message(FATAL_ERROR "INFINI_CCL_SANITIZER='${INFINI_CCL_SANITIZER}': expected '', 'address' or 'thread'")
endif()

# infini_ccl_target(<target>): our defaults for a target of ours.
function(infini_ccl_target target)
  target_link_libraries(${target} PRIVATE infini_ccl_warnings)
endfunction()

# InfiniCCL::plugin_abi: all a plugin compiles against, header-only: the
# ABI headers (infini/ccl/plugin_abi*.h) and dlpack's. No library of ours and
# none of their dependencies (glog), so a vendor's plugin needs neither.
# Installed in an export set of its own (cmake/InfiniCclInstall.cmake).
add_library(infini_ccl_plugin_abi INTERFACE)
add_library(InfiniCCL::plugin_abi ALIAS infini_ccl_plugin_abi)
set_target_properties(infini_ccl_plugin_abi PROPERTIES EXPORT_NAME plugin_abi)
target_include_directories(infini_ccl_plugin_abi INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/ccl/include>
  $<INSTALL_INTERFACE:include>)
target_link_libraries(infini_ccl_plugin_abi INTERFACE dlpack::dlpack)

# infini_ccl_plugin(<target> <name>): the same helper a plugin built out of
# tree gets; here it also applies infini_ccl_warnings.
include(${CMAKE_CURRENT_LIST_DIR}/InfiniCCLPlugin.cmake)
