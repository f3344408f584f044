# python.cmake — the Python package's CMake side: its library in the wheel (SKBUILD), its tests in ctest.
if(SKBUILD)
  # pip install (scikit-build-core, pyproject.toml): only moe_shared is built, and installed
  # beside the package's sources as libmoe/libmoe.so, where python/libmoe/_lib.py looks.
  install(PROGRAMS $<TARGET_FILE:moe_shared> DESTINATION libmoe RENAME libmoe.so COMPONENT python)
  return()
endif()
if((DEFINED MOE_BUILD_TESTS AND NOT MOE_BUILD_TESTS) OR NOT TARGET moe_shared OR NOT TARGET moe_cli)
  return()
endif()

# The venv scripts/ensure-venv.sh makes (`make test` runs it first): $MOE_VENV or .venv.
if(DEFINED ENV{MOE_VENV})
  set(_moe_venv $ENV{MOE_VENV})
else()
  set(_moe_venv ${PROJECT_SOURCE_DIR}/.venv)
endif()
set(MOE_PYTHON ${_moe_venv}/bin/python CACHE FILEPATH "The Python that runs tests/python")

set(_moe_py_env "LIBMOE_LIBRARY=$<TARGET_FILE:moe_shared>" "MOE_CLI=$<TARGET_FILE:moe_cli>"
                "CC=${CMAKE_C_COMPILER}" "OMP_WAIT_POLICY=passive")
# tests/python: the API against the library just built.
add_test(NAME python COMMAND ${MOE_PYTHON} -m pytest -q -p no:cacheprovider -m "not install"
                             ${PROJECT_SOURCE_DIR}/tests/python WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python PROPERTIES LABELS python ENVIRONMENT "${_moe_py_env}")
# `pip install .` into a scratch venv: compiles the library again (minutes), hence its own label.
add_test(NAME python_install COMMAND ${MOE_PYTHON} -m pytest -q -p no:cacheprovider -m install
                                     ${PROJECT_SOURCE_DIR}/tests/python WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_install PROPERTIES LABELS "python;install" TIMEOUT 1200
                     ENVIRONMENT "${_moe_py_env}")
