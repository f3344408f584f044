# tests.cmake — registers tests/install/test_*.sh: the exports of libmoe.so, the install tree, and the consumers of it.
# test_tree installs the build into install-test/ in the build folder; the pkg-config
# and find_package tests use that tree (a ctest fixture, so `ctest -R pkgconfig` installs
# first). test_exports and test_add_subdirectory need no install.
set(_prefix ${PROJECT_BINARY_DIR}/install-test)
set(_env
    "MOE_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    "MOE_BUILD_DIR=${PROJECT_BINARY_DIR}"
    "MOE_PREFIX=${_prefix}"
    "MOE_LIBDIR=${CMAKE_INSTALL_LIBDIR}"
    "MOE_CC=${CMAKE_C_COMPILER}"
    "MOE_CFLAGS=${CMAKE_C_FLAGS}"
    "MOE_NM=${CMAKE_NM}"
    "MOE_SHARED_LIB=$<TARGET_FILE:moe_shared>"
    "MOE_CLI=$<TARGET_FILE:moe_cli>"
    "OMP_WAIT_POLICY=passive")
file(GLOB _install_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/install/test_*.sh)
foreach(t ${_install_tests})
  get_filename_component(tn ${t} NAME_WE)
  string(REGEX REPLACE "^test_" "install_" name ${tn})
  add_test(NAME ${name} COMMAND bash ${t} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS install ENVIRONMENT "${_env}")
endforeach()
set_tests_properties(install_tree PROPERTIES FIXTURES_SETUP moe_installed)
set_tests_properties(install_pkgconfig install_find_package PROPERTIES FIXTURES_REQUIRED moe_installed)
