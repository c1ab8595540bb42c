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

# infini_ccl_plugin(<target> <name>): a backend plugin, libinfini_ccl_<name>.so,
# that exports only its infiniCclPlugin_v* symbols, so the vendor library and
# our static helpers inside it never clash with the host program's.
function(infini_ccl_plugin target name)
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME infini_ccl_${name}
    PREFIX lib
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined)
  infini_ccl_target(${target})
  install(TARGETS ${target} LIBRARY DESTINATION lib)
endfunction()
