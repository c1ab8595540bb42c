# infini_ccl_plugin(<target> <name> [NO_INSTALL]): makes the MODULE library
# <target> the backend plugin libinfini_ccl_<name>.so. One definition for
# this tree's plugins and for a plugin built out of tree: installed beside
# InfiniCCLConfig.cmake, loaded by find_package(InfiniCCL COMPONENTS plugin).
#
#   add_library(infini_ccl_myvendor MODULE plugin.cc)
#   infini_ccl_plugin(infini_ccl_myvendor myvendor)
#
# Installed to <prefix>/lib (NO_INSTALL: built only), with an RPATH of
# $ORIGIN and the directories of the libraries it links outside the system
# paths (a vendor library in /opt/vendor/lib), unless the target sets its
# own INSTALL_RPATH: the installed plugin finds its vendor library without
# LD_LIBRARY_PATH.
#
# The plugin exports only its infiniCclPlugin_v* symbols (hidden visibility,
# and no re-export of static libraries linked in), so the vendor library and
# helpers inside it never clash with the host program's. It must resolve
# every symbol at link time: the loader dlopens it into programs that know
# nothing of the vendor library.
function(infini_ccl_plugin target name)
  cmake_parse_arguments(PARSE_ARGV 2 plugin "NO_INSTALL" "" "")
  get_target_property(type ${target} TYPE)
  if(NOT type STREQUAL "MODULE_LIBRARY")
    message(FATAL_ERROR "infini_ccl_plugin(${target} ${name}): ${target} is a ${type}; "
                        "declare it with add_library(${target} MODULE ...)")
  endif()
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME infini_ccl_${name}
    PREFIX lib
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
  target_link_libraries(${target} PRIVATE InfiniCCL::plugin_abi)
  # In InfiniCCL's own tree, its warnings are errors in plugins too.
  if(TARGET infini_ccl_warnings)
    target_link_libraries(${target} PRIVATE infini_ccl_warnings)
  endif()
  get_target_property(rpath ${target} INSTALL_RPATH)
  if(NOT rpath)
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "\$ORIGIN")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  # lib/, beside libinfini_ccl.so: where the loader finds a plugin by name.
  if(NOT plugin_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION lib)
  endif()
endfunction()
