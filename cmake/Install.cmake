# `cmake --install <build> --prefix <dir>`: the public headers, libkvshrink.so, the kvshrink binary,
# a CMake package (find_package(kvshrink) -> kvshrink::kvshrink), a pkg-config file (kvshrink.pc)
# and, when built, the Python package (see python/CMakeLists.txt).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVS_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvshrink)

install(TARGETS kvshrink_lib EXPORT kvshrinkTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/kvshrink/kvshrink.h ${PROJECT_BINARY_DIR}/include/kvshrink/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvshrink)
if(TARGET kvshrink)
  # The binary finds libkvshrink.so nowhere: it links the engine statically.
  install(TARGETS kvshrink RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # What `kvshrink eval` finds beside the binary (<bindir>/../share/kvshrink, core/paths.h share_dir):
  # the default data (NIAH, RULER) and the report script.
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/eval/data/ DESTINATION ${CMAKE_INSTALL_DATADIR}/kvshrink/data)
  install(FILES ${PROJECT_SOURCE_DIR}/eval/report.py DESTINATION ${CMAKE_INSTALL_DATADIR}/kvshrink)
endif()

install(EXPORT kvshrinkTargets NAMESPACE kvshrink:: DESTINATION ${KVS_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvshrinkConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/kvshrinkConfig.cmake
                              INSTALL_DESTINATION ${KVS_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/kvshrinkConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/kvshrinkConfig.cmake ${PROJECT_BINARY_DIR}/cmake/kvshrinkConfigVersion.cmake
        DESTINATION ${KVS_CMAKE_INSTALL_DIR})

file(RELATIVE_PATH KVS_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvshrink.pc.in ${PROJECT_BINARY_DIR}/cmake/kvshrink.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/kvshrink.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
