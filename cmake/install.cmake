# What `cmake --install` puts under the prefix, and what pip's build takes.
#
#   lib/libkvtier.so*, lib/libkvtier.a     the libraries
#   include/kvtier.h                       the one public header
#   lib/pkgconfig/kvtier.pc                pkg-config (relocatable: ${pcfiledir})
#   lib/cmake/kvtier/                      find_package(kvtier): kvtier::kvtier
#                                          (the shared library where one is built,
#                                          else the static), kvtier::kvtier_static
#
# Under scikit-build-core (SKBUILD, pyproject.toml) only the "python"
# component is installed: libkvtier.so into the package directory, where
# bindings/python/kvtier/_lib.py looks first after KVTIER_LIB.
include(CMakePackageConfigHelpers)

set(KVT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
if(TARGET kvtier)
  set_target_properties(kvtier PROPERTIES EXPORT_NAME kvtier)
  set_target_properties(kvtier_static PROPERTIES EXPORT_NAME kvtier_static)
else()
  set_target_properties(kvtier_static PROPERTIES EXPORT_NAME kvtier)
endif()
install(TARGETS ${KVT_LIB_TARGETS} EXPORT kvtierTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
install(FILES include/kvtier.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${KVT_CMAKE_DIR} COMPONENT devel)
configure_package_config_file(cmake/kvtierConfig.cmake.in
  ${CMAKE_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${KVT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvtierConfig.cmake ${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${KVT_CMAKE_DIR} COMPONENT devel)

# kvtier.pc: Libs.private lists what a static link needs (the dependency
# files as found, then the system libraries they need); Requires.private the
# dependencies that have a .pc of their own (hiredis).
set(KVT_PC_PRIVATE "")
foreach(dep ${KVT_DEP_LIBS})
  if(HIREDIS_LIB AND dep STREQUAL HIREDIS_LIB)
    continue()  # Requires.private: hiredis (its own .pc says what it needs)
  endif()
  if(TARGET ${dep})
    get_target_property(loc ${dep} IMPORTED_LOCATION)
    if(loc)
      string(APPEND KVT_PC_PRIVATE " ${loc} -ldl -lrt")
    endif()
  else()
    string(APPEND KVT_PC_PRIVATE " ${dep}")
  endif()
endforeach()
string(APPEND KVT_PC_PRIVATE " -lpthread")
# The prefix is found from the file's own place, so that
# `cmake --install --prefix P` gives a kvtier.pc that points into P.
file(RELATIVE_PATH KVT_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" KVT_PC_UP "${KVT_PC_UP}")
configure_file(cmake/kvtier.pc.in ${CMAKE_BINARY_DIR}/kvtier.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kvtier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT devel)

if(SKBUILD AND TARGET kvtier)
  # What pip's build builds (pyproject.toml's build.targets): the library
  # alone. Not "kvtier": under Ninja that names the command's output file.
  add_custom_target(kvtier_python DEPENDS kvtier)
  # One file, not the .so -> .so.0 -> .so.0.1.0 links, which a wheel cannot hold.
  install(FILES $<TARGET_FILE:kvtier> DESTINATION kvtier RENAME libkvtier.so COMPONENT python)
endif()
