# libFuzzer targets for every decoder of disk and network input (make fuzz;
# docs/fuzzing.md lists them and what each asserts).
#
# msgpack-c's own sources are compiled in, instrumented like ours: against
# Debian's shared library the fuzzer sees about a tenth of the edges
# (NOTES.md). TROUPE_MSGPACK_SRC is the tree that
# scripts/fetch-msgpack-src.sh unpacks (src/*.c, include/, cmake/*.h.in);
# the two headers its own build generates (sysdep.h, pack_template.h) are
# configured here. Every troupe module's sources (runtime, protocols,
# storage, actors) are compiled once more into one static library with the
# same instrumentation; nothing links the uninstrumented module libraries.
# The targets see the actor modules' public and internal headers, as the
# Check suites do, and no module's src/.
# RocksDB, libuv and nng stay the system's (uninstrumented) libraries:
# targets that need storage open a real database in a temporary directory.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TROUPE_FUZZ needs clang: -DCMAKE_C_COMPILER=clang")
endif()
if(NOT TROUPE_MSGPACK_SRC OR NOT EXISTS "${TROUPE_MSGPACK_SRC}/src/unpack.c")
  message(FATAL_ERROR "TROUPE_MSGPACK_SRC='${TROUPE_MSGPACK_SRC}' is not a "
          "msgpack-c source tree; run scripts/fetch-msgpack-src.sh")
endif()

set(TROUPE_FUZZ_MSGPACK_INC ${CMAKE_CURRENT_BINARY_DIR}/msgpack-include)
include(TestBigEndian)
test_big_endian(TROUPE_FUZZ_BIG_ENDIAN)
if(TROUPE_FUZZ_BIG_ENDIAN)
  set(MSGPACK_ENDIAN_BIG_BYTE 1)
  set(MSGPACK_ENDIAN_LITTLE_BYTE 0)
else()
  set(MSGPACK_ENDIAN_BIG_BYTE 0)
  set(MSGPACK_ENDIAN_LITTLE_BYTE 1)
endif()
foreach(hdr sysdep pack_template)
  configure_file(${TROUPE_MSGPACK_SRC}/cmake/${hdr}.h.in
                 ${TROUPE_FUZZ_MSGPACK_INC}/msgpack/${hdr}.h @ONLY)
endforeach()

# Instrumentation: the library objects get coverage without libFuzzer's
# main (fuzzer-no-link); each target links libFuzzer itself.
set(TROUPE_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -g -O1)
set(TROUPE_FUZZ_LIB_FLAGS -fsanitize=fuzzer-no-link ${TROUPE_FUZZ_SAN})

file(GLOB TROUPE_FUZZ_MSGPACK_SRC ${TROUPE_MSGPACK_SRC}/src/*.c)
file(GLOB TROUPE_FUZZ_CORE_SRC CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/runtime/src/*.c
     ${PROJECT_SOURCE_DIR}/protocols/src/*.c
     ${PROJECT_SOURCE_DIR}/protocols/src/transport/*.c
     ${PROJECT_SOURCE_DIR}/storage/src/*.c
     ${PROJECT_SOURCE_DIR}/storage/src/*.cc)
# The actor modules as actors/module.cmake defines them: each module's
# sources, and what a target linking troupe_<m>_internal sees (its public
# and internal headers; a module's src/ stays its own: its files include
# their private header from their own folder).
set(TROUPE_FUZZ_ACTOR_INC)
foreach(m ${TROUPE_ACTOR_MODULES})
  get_target_property(msrc troupe_${m} SOURCES)
  list(APPEND TROUPE_FUZZ_CORE_SRC ${msrc})
  foreach(t troupe_${m} troupe_${m}_internal)
    get_target_property(minc ${t} INTERFACE_INCLUDE_DIRECTORIES)
    if(minc)
      list(APPEND TROUPE_FUZZ_ACTOR_INC ${minc})
    endif()
  endforeach()
endforeach()

# The source tree's headers must win over /usr/include/msgpack. msgpack-c
# includes the generated ones both as "msgpack/sysdep.h" and, from its own
# headers, as "sysdep.h": both directories are searched.
set(TROUPE_FUZZ_MSGPACK_DIRS ${TROUPE_FUZZ_MSGPACK_INC}
    ${TROUPE_FUZZ_MSGPACK_INC}/msgpack ${TROUPE_MSGPACK_SRC}/include)
set(TROUPE_FUZZ_INC
    ${PROJECT_SOURCE_DIR}/runtime/include ${PROJECT_SOURCE_DIR}/runtime/src
    ${PROJECT_SOURCE_DIR}/runtime/internal
    ${PROJECT_BINARY_DIR}/runtime/include
    ${PROJECT_SOURCE_DIR}/protocols/include ${PROJECT_SOURCE_DIR}/protocols/src
    ${PROJECT_SOURCE_DIR}/storage/include ${PROJECT_SOURCE_DIR}/storage/src
    ${TROUPE_FUZZ_ACTOR_INC})

add_library(troupe_fuzz_msgpack STATIC ${TROUPE_FUZZ_MSGPACK_SRC})
target_include_directories(troupe_fuzz_msgpack BEFORE PRIVATE
                           ${TROUPE_FUZZ_MSGPACK_DIRS})
target_compile_options(troupe_fuzz_msgpack PRIVATE ${TROUPE_FUZZ_LIB_FLAGS})

add_library(troupe_fuzz_core STATIC ${TROUPE_FUZZ_CORE_SRC})
target_include_directories(troupe_fuzz_core BEFORE PRIVATE
                           ${TROUPE_FUZZ_MSGPACK_DIRS})
target_include_directories(troupe_fuzz_core PRIVATE ${TROUPE_FUZZ_INC})
target_compile_options(troupe_fuzz_core PRIVATE ${TROUPE_FUZZ_LIB_FLAGS})
set_target_properties(troupe_fuzz_core PROPERTIES CXX_STANDARD 17
                      CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_link_libraries(troupe_fuzz_core PUBLIC troupe_fuzz_msgpack
                      PkgConfig::ROCKSDB PkgConfig::UV ${TROUPE_NNG}
                      ${MBEDX509_LIB} ${MBEDCRYPTO_LIB}
                      Threads::Threads m)

# The targets, in the order `make fuzz` runs them; each is fuzz_<name>.c
# with its saved corpus in corpus/<name>/.
set(TROUPE_FUZZ_TARGETS envelope handshake keycodec catalog index_def rows
    derive replies cursor actors gtx wfrun xarec)
# The stateful ones run a node (fuzz_node.c).
set(TROUPE_FUZZ_NODE_TARGETS cursor actors)
add_custom_target(troupe_fuzz_all)
foreach(t ${TROUPE_FUZZ_TARGETS})
  add_executable(fuzz_${t} fuzz_${t}.c fuzz_support.c)
  if(t IN_LIST TROUPE_FUZZ_NODE_TARGETS)
    target_sources(fuzz_${t} PRIVATE fuzz_node.c)
  endif()
  target_include_directories(fuzz_${t} BEFORE PRIVATE
                             ${TROUPE_FUZZ_MSGPACK_DIRS})
  target_include_directories(fuzz_${t} PRIVATE ${TROUPE_FUZZ_INC})
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${TROUPE_FUZZ_SAN})
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_${t} PRIVATE troupe_fuzz_core)
  add_dependencies(troupe_fuzz_all fuzz_${t})
endforeach()

# Writes the saved corpora from the real encoders (docs/fuzzing.md).
add_executable(fuzz_mkseeds mkseeds.c fuzz_support.c)
target_include_directories(fuzz_mkseeds BEFORE PRIVATE
                           ${TROUPE_FUZZ_MSGPACK_DIRS})
target_include_directories(fuzz_mkseeds PRIVATE ${TROUPE_FUZZ_INC})
target_compile_options(fuzz_mkseeds PRIVATE ${TROUPE_FUZZ_LIB_FLAGS})
target_link_options(fuzz_mkseeds PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
target_link_libraries(fuzz_mkseeds PRIVATE troupe_fuzz_core)
add_dependencies(troupe_fuzz_all fuzz_mkseeds)

string(REPLACE ";" "\n" TROUPE_FUZZ_LIST "${TROUPE_FUZZ_TARGETS}")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/targets.txt "${TROUPE_FUZZ_LIST}\n")
