# jansson_source.cmake — jansson compiled from its source folder instead of the system library (the fuzz build).
# With MOE_JANSSON_SOURCE set (scripts/fetch-jansson.sh unpacks Debian's source package and
# prints the folder; scripts/fuzz.sh passes it), jansson's sources are compiled with the
# build's own flags, so the fuzz flags' coverage feedback and sanitizers reach inside the JSON
# parser, and PkgConfig::JANSSON names that static copy. Not for an installed libmoe: the
# install rules are off.
file(GLOB _jansson_srcs ${MOE_JANSSON_SOURCE}/src/*.c)
if(NOT _jansson_srcs OR NOT EXISTS ${MOE_JANSSON_SOURCE}/src/jansson_private_config.h)
  message(FATAL_ERROR "MOE_JANSSON_SOURCE=${MOE_JANSSON_SOURCE} holds no configured jansson "
                      "(scripts/fetch-jansson.sh makes one)")
endif()
add_library(moe_jansson STATIC ${_jansson_srcs})
target_compile_definitions(moe_jansson PRIVATE HAVE_CONFIG_H)
target_include_directories(moe_jansson SYSTEM PUBLIC ${MOE_JANSSON_SOURCE}/src)
# Third-party code: its warnings are not ours to fix (-w), and it is written for gnu11.
target_compile_options(moe_jansson PRIVATE -w)
set_target_properties(moe_jansson PROPERTIES C_EXTENSIONS ON POSITION_INDEPENDENT_CODE ON)
add_library(PkgConfig::JANSSON ALIAS moe_jansson)
set(MOE_INSTALL OFF)
message(STATUS "jansson: compiled from ${MOE_JANSSON_SOURCE}")
