# `cmake --install` gives bin/ lib/ include/ and a package config, so a
# framework can find_package(InfiniCCL) and link InfiniCCL::ccl.
include(CMakePackageConfigHelpers)
set(INFINI_CCL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/InfiniCCL)
install(EXPORT InfiniCCLTargets NAMESPACE InfiniCCL:: DESTINATION ${INFINI_CCL_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/InfiniCCLConfig.cmake.in
  ${PROJECT_BINARY_DIR}/InfiniCCLConfig.cmake INSTALL_DESTINATION ${INFINI_CCL_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/InfiniCCLConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/InfiniCCLConfig.cmake
              ${PROJECT_BINARY_DIR}/InfiniCCLConfigVersion.cmake
        DESTINATION ${INFINI_CCL_CMAKE_DIR})

# The plugin kit, for a plugin built out of tree: InfiniCCL::plugin_abi in
# an export set of its own, so find_package(InfiniCCL COMPONENTS plugin)
# loads it without the libraries' targets and their dependencies; and the
# helper that makes a plugin. The ABI headers come with ccl/'s include/.
install(TARGETS infini_ccl_plugin_abi EXPORT InfiniCCLPluginTargets)
install(EXPORT InfiniCCLPluginTargets NAMESPACE InfiniCCL:: DESTINATION ${INFINI_CCL_CMAKE_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/cmake/InfiniCCLPlugin.cmake DESTINATION ${INFINI_CCL_CMAKE_DIR})

# dlpack's header, which every public header includes: the package ships it
# (InfiniCCLConfig.cmake makes dlpack::dlpack of it), so a consumer needs no
# dlpack package of its own.
get_target_property(INFINI_CCL_DLPACK_DIRS dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
find_file(INFINI_CCL_DLPACK_HEADER dlpack/dlpack.h PATHS ${INFINI_CCL_DLPACK_DIRS} NO_DEFAULT_PATH)
if(NOT INFINI_CCL_DLPACK_HEADER)
  message(FATAL_ERROR "dlpack/dlpack.h not found in dlpack::dlpack's include directories "
                      "'${INFINI_CCL_DLPACK_DIRS}'")
endif()
install(FILES ${INFINI_CCL_DLPACK_HEADER} DESTINATION include/dlpack)

# The public headers use C++20 (std::span, designated initializers): the
# exported libraries say so, so a consumer gets -std=c++20 without asking.
foreach(target infini_common infini_ccl infini_rendezvous infini_rendezvous_etcd infini_parallel
               infini_dataloader)
  if(TARGET ${target})
    target_compile_features(${target} INTERFACE cxx_std_20)
  endif()
endforeach()
