# public_library.cmake - wst_public_library(): one of our libraries as a
# shared object that exports only its public API.
#
#   wst_public_library(NAME SOURCES file... LINK target... EXPORT sym...)
#
# builds lib<NAME>.so in build/lib from SOURCES and links the static
# libraries in LINK into itself. A version script exports only EXPORT
# (names or globs of the public headers' functions), so none of our
# internal symbols can clash with a host process's, and a program or a
# ctypes binding that loads it sees the public API alone. The sender's
# and the receiver's libraries are both made here, so they look alike.
function(wst_public_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LINK;EXPORT")
  set(map ${CMAKE_CURRENT_BINARY_DIR}/${name}.map)
  list(JOIN arg_EXPORT ";\n    " globals)
  file(WRITE ${map} "{\n  global:\n    ${globals};\n  local:\n    *;\n};\n")
  add_library(${name} SHARED ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LINK})
  # A program linked against it sees the public headers alone.
  target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/include)
  # --no-undefined: a dependency missing from the link fails the build
  # here, not the first dlopen in a host process.
  target_link_options(${name} PRIVATE "LINKER:--version-script=${map}"
                      "LINKER:--no-undefined")
  set_target_properties(${name} PROPERTIES
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                        LINK_DEPENDS ${map})
endfunction()
