# python.cmake — the Python package's CMake side: its library in the wheel (SKBUILD), its tests in ctest.
if(SKBUILD)
  # pip install (scikit-build-core, pyproject.toml): only moe_shared is built, and installed
  # beside the package's sources as libmoe/libmoe.so, where python/libmoe/_lib.py looks.
  install(PROGRAMS $<TARGET_FILE:moe_shared> DESTINATION libmoe RENAME libmoe.so COMPONENT python)
  return()
endif()
# Not in a sanitizer build: a sanitized libmoe.so cannot be loaded into an uninstrumented Python
# (the runtime must come first); the C suite is what those builds check.
if((DEFINED MOE_BUILD_TESTS AND NOT MOE_BUILD_TESTS) OR NOT TARGET moe_shared OR NOT TARGET moe_cli
   OR CMAKE_C_FLAGS MATCHES "-fsanitize")
  return()
endif()

# The Python: MOE_PYTHON if set, else that of the venv scripts/ensure-venv.sh makes (`make test`
# runs it first), ${MOE_VENV:-.venv}, resolved when the test runs, as ensure-venv.sh resolves it.
set(MOE_PYTHON "" CACHE FILEPATH "The Python that runs tests/python (empty: the project venv)")
if(MOE_PYTHON)
  set(_moe_py ${MOE_PYTHON})
else()
  set(_moe_py sh -c "exec \"\${MOE_VENV:-${PROJECT_SOURCE_DIR}/.venv}/bin/python\" \"$@\"" python)
endif()

enable_testing()
set(_moe_py_env "LIBMOE_LIBRARY=$<TARGET_FILE:moe_shared>" "MOE_CLI=$<TARGET_FILE:moe_cli>"
                "CC=${CMAKE_C_COMPILER}" "OMP_WAIT_POLICY=passive")
# tests/python: the API against the library just built.
add_test(NAME python COMMAND ${_moe_py} -m pytest -q -p no:cacheprovider -m "not pip"
                             ${PROJECT_SOURCE_DIR}/tests/python WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python PROPERTIES LABELS python ENVIRONMENT "${_moe_py_env}")
# `pip install .` into a scratch venv: compiles the library again (minutes), hence its own label.
add_test(NAME python_pip COMMAND ${_moe_py} -m pytest -q -p no:cacheprovider -m pip
                              ${PROJECT_SOURCE_DIR}/tests/python WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_pip PROPERTIES LABELS "python;pip" TIMEOUT 1200
                     ENVIRONMENT "${_moe_py_env}")
