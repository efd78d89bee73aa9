# Layers point one way: arch/ <- core/ <- preload/.
#   arch/    may include only arch/ (and system headers)
#   core/    may include arch/ and core/, never preload/
#   preload/ may include all three; inside it, the rooms as check_room says
# A quoted include that climbs out of its directory ("../") is refused too,
# since it could reach any layer. Inside a layer, two files (x.h and x.cpp
# count as one, `x`) may not include each other: a loop that one of them
# should break by moving what both need into a third.
# Run: cmake -DSOURCE_DIR=<repo> -P check_layering.cmake
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "usage: cmake -DSOURCE_DIR=<repository root> -P check_layering.cmake")
endif()

set(_violations "")
set(_edges "")  # "a>b": a file of `a` includes b's header (same layer)
function(check_layer layer forbidden_regex)
  file(GLOB_RECURSE _files RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.hpp ${SOURCE_DIR}/${layer}/*.cpp ${SOURCE_DIR}/${layer}/*.c)
  foreach(_file IN LISTS _files)
    string(REGEX REPLACE "\\.[a-z]+$" "" _from "${_file}")
    file(STRINGS ${SOURCE_DIR}/${_file} _includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(_line IN LISTS _includes)
      if(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"(${layer}/[^\"]+)\\.h\"")
        if(NOT CMAKE_MATCH_1 STREQUAL _from)
          list(APPEND _edges "${_from}>${CMAKE_MATCH_1}")
        endif()
      endif()
      if(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<](${forbidden_regex})")
        list(APPEND _violations "${_file}: ${_line}")
      elseif(_line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
        list(APPEND _violations "${_file}: ${_line} (climbs out of its directory)")
      endif()
    endforeach()
  endforeach()
  set(_violations "${_violations}" PARENT_SCOPE)
  set(_edges "${_edges}" PARENT_SCOPE)
endfunction()

check_layer(arch "core/|preload/|tests/")
check_layer(core "preload/|tests/")
check_layer(preload "tests/")

# Inside preload/, rooms point one way too: the families (pthread/, lwlock/,
# wtlock/) never include one another; the statistics (stats/) and the
# settings (config/) include no family, and config/ not the statistics
# either: a family registers its records with stats/, and what the settings
# start is the shim's (preload/boot.cpp).
function(check_room room forbidden_regex)
  file(GLOB_RECURSE _files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/preload/${room}/*.h ${SOURCE_DIR}/preload/${room}/*.cpp)
  foreach(_file IN LISTS _files)
    file(STRINGS ${SOURCE_DIR}/${_file} _includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"preload/")
    foreach(_line IN LISTS _includes)
      if(_line MATCHES "\"preload/(${forbidden_regex})/")
        list(APPEND _violations "${_file}: ${_line} (preload/${room}/ may not include preload/${CMAKE_MATCH_1}/)")
      endif()
    endforeach()
  endforeach()
  set(_violations "${_violations}" PARENT_SCOPE)
endfunction()

check_room(pthread "lwlock|wtlock")
check_room(lwlock "pthread|wtlock")
check_room(wtlock "pthread|lwlock")
check_room(stats "pthread|lwlock|wtlock")
check_room(config "pthread|lwlock|wtlock|stats")

foreach(_edge IN LISTS _edges)
  string(REPLACE ">" ";" _pair "${_edge}")
  list(GET _pair 0 _a)
  list(GET _pair 1 _b)
  list(FIND _edges "${_b}>${_a}" _back)
  if(_a STRLESS _b AND _back GREATER -1)
    list(APPEND _violations "${_a} and ${_b} include each other")
  endif()
endforeach()

if(_violations)
  list(JOIN _violations "\n  " _text)
  message(FATAL_ERROR "includes against the layering (arch <- core <- preload):\n  ${_text}")
endif()
message(STATUS "layering: arch/ -> core/ -> preload/ includes point one way")
