# Layers point one way: arch/ <- core/ <- preload/.
#   arch/    may include only arch/ (and system headers)
#   core/    may include arch/ and core/, never preload/
#   preload/ may include all three
# A quoted include that climbs out of its directory ("../") is refused too,
# since it could reach any layer. Run: cmake -DSOURCE_DIR=<repo> -P check_layering.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository root> -P check_layering.cmake")
endif()

set(_violations "")
function(check_layer layer forbidden_regex)
  file(GLOB_RECURSE _files RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.hpp ${SOURCE_DIR}/${layer}/*.cpp ${SOURCE_DIR}/${layer}/*.c)
  foreach(_file IN LISTS _files)
    if(_file MATCHES "^preload/cli/")  # the command-line tools are not a layer of the library
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${_file} _includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(_line IN LISTS _includes)
      if(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<](${forbidden_regex})")
        list(APPEND _violations "${_file}: ${_line}")
      elseif(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
        list(APPEND _violations "${_file}: ${_line} (climbs out of its directory)")
      endif()
    endforeach()
  endforeach()
  set(_violations "${_violations}" PARENT_SCOPE)
endfunction()

check_layer(arch "core/|preload/|tests/")
check_layer(core "preload/|tests/")
check_layer(preload "tests/")

if(_violations)
  list(JOIN _violations "\n  " _text)
  message(FATAL_ERROR "includes against the layering (arch <- core <- preload):\n  ${_text}")
endif()
message(STATUS "layering: arch/ -> core/ -> preload/ includes point one way")
