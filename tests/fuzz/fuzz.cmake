# libFuzzer target for the envelope decoder (make fuzz).
#
# msgpack-c's own sources are compiled into the target, instrumented like
# ours: against Debian's shared library the fuzzer sees about a tenth of the
# edges (NOTES.md). TROUPE_MSGPACK_SRC is the tree that
# scripts/fetch-msgpack-src.sh unpacks (src/*.c, include/, cmake/*.h.in);
# the two headers its own build generates (sysdep.h, pack_template.h) are
# configured here. The troupe sources the decoder needs (protocols' codec
# files, the runtime's message and allocator code) are compiled in with the
# same instrumentation; nothing links the uninstrumented module libraries.
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

file(GLOB TROUPE_FUZZ_MSGPACK_SRC ${TROUPE_MSGPACK_SRC}/src/*.c)
file(GLOB TROUPE_FUZZ_RUNTIME_SRC CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/runtime/src/*.c)
set(TROUPE_FUZZ_PROTOCOLS_SRC
    ${PROJECT_SOURCE_DIR}/protocols/src/mpwalk.c
    ${PROJECT_SOURCE_DIR}/protocols/src/wire.c
    ${PROJECT_SOURCE_DIR}/protocols/src/pack.c
    ${PROJECT_SOURCE_DIR}/protocols/src/read.c)

add_executable(fuzz_envelope fuzz_envelope.c ${TROUPE_FUZZ_PROTOCOLS_SRC}
               ${TROUPE_FUZZ_RUNTIME_SRC} ${TROUPE_FUZZ_MSGPACK_SRC})
# The source tree's headers must win over /usr/include/msgpack. msgpack-c
# includes the generated ones both as "msgpack/sysdep.h" and, from its own
# headers, as "sysdep.h": both directories are searched.
target_include_directories(fuzz_envelope BEFORE PRIVATE
    ${TROUPE_FUZZ_MSGPACK_INC} ${TROUPE_FUZZ_MSGPACK_INC}/msgpack
    ${TROUPE_MSGPACK_SRC}/include)
target_include_directories(fuzz_envelope PRIVATE
    ${PROJECT_SOURCE_DIR}/protocols/include ${PROJECT_SOURCE_DIR}/protocols/src
    ${PROJECT_SOURCE_DIR}/runtime/include ${PROJECT_SOURCE_DIR}/runtime/src)
set(TROUPE_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1)
target_compile_options(fuzz_envelope PRIVATE ${TROUPE_FUZZ_FLAGS})
target_link_options(fuzz_envelope PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_envelope PRIVATE PkgConfig::UV Threads::Threads)
