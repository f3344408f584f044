# install.cmake — what `cmake --install` puts where: header, both libraries, the CLI, the CMake package, libmoe.pc.
include(CMakePackageConfigHelpers)
set(MOE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/libmoe)

install(FILES ${PROJECT_SOURCE_DIR}/include/moe.h ${PROJECT_SOURCE_DIR}/include/moe_ep.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS moe moe_shared EXPORT libmoeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET moe_cli)
  install(TARGETS moe_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# find_package(libmoe): libmoe::moe (shared) and libmoe::moe_static, whose link interface names
# PkgConfig::JANSSON, Threads::Threads and OpenMP::OpenMP_C: libmoeConfig.cmake finds them.
install(EXPORT libmoeTargets NAMESPACE libmoe:: DESTINATION ${MOE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/libmoeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/libmoeConfig.cmake INSTALL_DESTINATION ${MOE_CMAKE_DIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/libmoeConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/libmoeConfig.cmake ${PROJECT_BINARY_DIR}/libmoeConfigVersion.cmake
        DESTINATION ${MOE_CMAKE_DIR})

# libmoe.pc: written at install time, so that its prefix is the one installed into
# (`cmake --install B --prefix P`), not the one configured. Libs.private is what a static link
# of libmoe.a needs: the OpenMP runtime this compiler uses (gomp for gcc, omp for clang) with
# its folder, which the other compiler's driver does not search (clang's libomp is in
# /usr/lib/llvm-N/lib on Debian), libm and pthreads; jansson comes through Requires.private.
set(MOE_PC_OPENMP_LIBS)
foreach(l ${OpenMP_C_LIB_NAMES})
  if(l STREQUAL "pthread")
    continue()
  endif()
  if(OpenMP_${l}_LIBRARY)
    get_filename_component(_dir ${OpenMP_${l}_LIBRARY} DIRECTORY)
    string(APPEND MOE_PC_OPENMP_LIBS " -L${_dir}")
  endif()
  string(APPEND MOE_PC_OPENMP_LIBS " -l${l}")
endforeach()
install(CODE "
  set(MOE_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(MOE_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(MOE_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(MOE_PC_VERSION \"${PROJECT_VERSION}\")
  set(MOE_PC_OPENMP_LIBS \"${MOE_PC_OPENMP_LIBS}\")
  set(moe_pc \"\$ENV{DESTDIR}\${MOE_PC_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig/libmoe.pc\")
  message(STATUS \"Installing: \${moe_pc}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/libmoe.pc.in\" \"\${moe_pc}\" @ONLY)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${moe_pc}\")
")
