# ctest consumer_install: installs the build tree into WORK/prefix with
# `cmake --install`, then builds tests/consumer against it twice, through
# find_package(kvtier) (shared and static targets) and through pkg-config,
# and runs each program.
#   cmake -DBUILD=<kvtier build dir> -DSRC=<tests/consumer> -DWORK=<dir>
#         -DCC=<C compiler> -DPKG_CONFIG=<pkg-config> -P check.cmake
foreach(v BUILD SRC WORK CC PKG_CONFIG)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check.cmake: -D${v}= is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_ok what exe)
  run("${what}" ${exe})
  if(NOT out MATCHES "kvtier consumer: ok")
    message(FATAL_ERROR "${what}: unexpected output: ${out}")
  endif()
  message(STATUS "${what}: ${out}")
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix} --component devel)

# find_package(kvtier)
run("configure the consumer" ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/cmake
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC} -DCMAKE_BUILD_TYPE=Release)
run("build the consumer" ${CMAKE_COMMAND} --build ${WORK}/cmake)
expect_ok("find_package, kvtier::kvtier" ${WORK}/cmake/consumer)
expect_ok("find_package, kvtier::kvtier_static" ${WORK}/cmake/consumer_static)

# pkg-config
file(GLOB_RECURSE pc ${prefix}/kvtier.pc)
if(NOT pc)
  message(FATAL_ERROR "no kvtier.pc under ${prefix}")
endif()
get_filename_component(pcdir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
run("pkg-config" ${PKG_CONFIG} --cflags --libs kvtier)
string(STRIP "${out}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run("pkg-config libdir" ${PKG_CONFIG} --variable=libdir kvtier)
string(STRIP "${out}" libdir)
file(MAKE_DIRECTORY ${WORK}/pc)
run("cc with pkg-config's flags" ${CC} ${SRC}/consumer.c ${flags} -Wl,-rpath,${libdir}
    -o ${WORK}/pc/consumer)
expect_ok("pkg-config" ${WORK}/pc/consumer)
