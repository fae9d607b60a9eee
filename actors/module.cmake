# troupe_actor_module(<m> [DEPS <module>...]): the static library
# troupe_<m> from actors/<m>/src/*.c. Its public headers (include/) reach
# every user of it; its internal tier (internal/) reaches only the modules
# that name <m> in DEPS, through the INTERFACE target troupe_<m>_internal,
# and the tests, benches and fuzz targets that link that target. A module
# never sees the internal tier of one it does not name, nor anyone's src/.
function(troupe_actor_module m)
  cmake_parse_arguments(A "" "" "DEPS" ${ARGN})
  set(dir ${CMAKE_CURRENT_SOURCE_DIR})
  file(GLOB src CONFIGURE_DEPENDS ${dir}/src/*.c)
  add_library(troupe_${m} STATIC ${src})
  if(EXISTS ${dir}/include)
    target_include_directories(troupe_${m} PUBLIC ${dir}/include)
  endif()
  target_include_directories(troupe_${m} PRIVATE ${dir}/src)
  if(EXISTS ${dir}/internal)
    target_include_directories(troupe_${m} PRIVATE ${dir}/internal)
  endif()
  target_compile_options(troupe_${m} PRIVATE ${TROUPE_WARNINGS})
  set_target_properties(troupe_${m} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(troupe_${m} PUBLIC troupe_storage troupe_protocols
                        troupe_runtime PRIVATE troupe_runtime_internal)
  add_library(troupe_${m}_internal INTERFACE)
  if(EXISTS ${dir}/internal)
    target_include_directories(troupe_${m}_internal INTERFACE ${dir}/internal)
  endif()
  target_link_libraries(troupe_${m}_internal INTERFACE troupe_${m})
  foreach(d ${A_DEPS})
    target_link_libraries(troupe_${m} PUBLIC troupe_${d}
                          PRIVATE troupe_${d}_internal)
  endforeach()
endfunction()
