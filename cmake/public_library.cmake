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
#
# Versioned (cmake/install.cmake installs them): lib<NAME>.so.X.Y.Z with
# the soname lib<NAME>.so.0.MINOR before 1.0 (a minor release may break the
# ABI, semantic versioning's rule for 0.y.z), lib<NAME>.so.MAJOR from 1.0
# on, and the lib<NAME>.so link for the linker and for ctypes. Installed
# and exported as wstream::<NAME without "wstream_">, e.g. wstream::sender.
include(GNUInstallDirs)

function(wst_public_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LINK;EXPORT")
  set(map ${CMAKE_CURRENT_BINARY_DIR}/${name}.map)
  list(JOIN arg_EXPORT ";\n    " globals)
  file(WRITE ${map} "{\n  global:\n    ${globals};\n  local:\n    *;\n};\n")
  add_library(${name} SHARED ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LINK})
  # A program linked against it sees the public headers alone.
  target_include_directories(${name} INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # --no-undefined: a dependency missing from the link fails the build
  # here, not the first dlopen in a host process.
  target_link_options(${name} PRIVATE "LINKER:--version-script=${map}"
                      "LINKER:--no-undefined")
  if(PROJECT_VERSION_MAJOR EQUAL 0)
    set(soversion 0.${PROJECT_VERSION_MINOR})
  else()
    set(soversion ${PROJECT_VERSION_MAJOR})
  endif()
  string(REGEX REPLACE "^wstream_" "" export_name ${name})
  set_target_properties(${name} PROPERTIES
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                        LINK_DEPENDS ${map}
                        VERSION ${PROJECT_VERSION}
                        SOVERSION ${soversion}
                        EXPORT_NAME ${export_name})
endfunction()
