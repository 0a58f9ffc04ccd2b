# install.cmake - what `cmake --install` puts under a prefix: the two
# shared libraries (versioned, cmake/public_library.cmake), the public
# headers with wstream/version.h, the programs, pkg-config files
# (wstream-sender.pc, wstream-receiver.pc) and a CMake package
# (find_package(wstream): wstream::sender, wstream::receiver). Test-only
# programs stay in the build tree. Target wst-installed builds exactly
# what is installed (a Release check in .ci/run builds only that).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(WST_INSTALLED_LIBRARIES wstream_sender wstream_receiver)
# The demo and the bench start the agent, the engine stand-in and the tcp
# floor from beside themselves: all go to one bin directory.
set(WST_INSTALLED_PROGRAMS wstream-agent wstream-send wstream-demo
    wstream-bench wstream-tcp-floor wstream-topology wstream-engine-standin
    wstream-model)
add_custom_target(wst-installed)
add_dependencies(wst-installed ${WST_INSTALLED_LIBRARIES}
                 ${WST_INSTALLED_PROGRAMS})

set(WST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/wstream)
install(TARGETS ${WST_INSTALLED_LIBRARIES} EXPORT wstream-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ${WST_INSTALLED_PROGRAMS}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/wstream/loader.h include/wstream/receiver.h
              include/wstream/sender.h include/wstream/status.h
              ${PROJECT_BINARY_DIR}/include/wstream/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wstream)
install(FILES LICENSE CHANGELOG.md README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(EXPORT wstream-targets NAMESPACE wstream::
        FILE wstream-targets.cmake DESTINATION ${WST_CMAKE_DIR})
configure_package_config_file(cmake/wstream-config.cmake.in
  ${PROJECT_BINARY_DIR}/wstream-config.cmake
  INSTALL_DESTINATION ${WST_CMAKE_DIR})
# Before 1.0 a minor release may break the API (as the soname says).
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/wstream-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/wstream-config.cmake
              ${PROJECT_BINARY_DIR}/wstream-config-version.cmake
        DESTINATION ${WST_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own place
# (${pcfiledir}), so a tree installed with --prefix, or moved, still
# answers right; absolute install dirs are written as they are.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}"
   OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(WST_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(WST_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(WST_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH up /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
  string(REGEX REPLACE "/$" "" up "${up}")
  set(WST_PC_PREFIX "\${pcfiledir}/${up}")
  set(WST_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(WST_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What the libraries link privately (for a static link; a shared link
# needs -lwstream_<side> alone: the library names its own dependencies).
set(WST_PC_REQUIRES_PRIVATE "ucx libprotobuf-c libxxhash libcrypto")
set(WST_PC_LIBS_PRIVATE "-lucs -pthread")
foreach(side sender receiver)
  set(WST_PC_SIDE ${side})
  configure_file(cmake/wstream.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/wstream-${side}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/wstream-${side}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
