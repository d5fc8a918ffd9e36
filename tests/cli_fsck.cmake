# Runs `kvtier inspect` and `kvtier fsck` end to end on their error paths
# (tests/test_fsck.c covers real spill directories): --help, a missing DIR, a
# directory that is not a spill directory, and one with a damaged layout file.
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/plain" "${WORK}/damaged")
file(WRITE "${WORK}/damaged/KVTIER" "kvtier-ssd 99\n")

# expect(<exit code> <regex stderr must match> <args...>)
function(expect want_rc want_err)
  execute_process(COMMAND ${KVTIER} ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR
            "kvtier ${ARGN}: exit ${rc}, want ${want_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT err MATCHES "${want_err}")
    message(FATAL_ERROR "kvtier ${ARGN}: stderr does not match '${want_err}': ${err}")
  endif()
  # An error leaves stdout empty, but for --json's error object.
  list(FIND ARGN "--json" json_at)
  if(want_rc EQUAL 1 AND NOT out STREQUAL "" AND json_at LESS 0)
    message(FATAL_ERROR "kvtier ${ARGN}: an error leaves stdout empty, got: ${out}")
  endif()
endfunction()

foreach(cmd inspect fsck)
  execute_process(COMMAND ${KVTIER} ${cmd} --help
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: kvtier ${cmd} DIR")
    message(FATAL_ERROR "kvtier ${cmd} --help: exit ${rc}, stdout: ${out}")
  endif()
  expect(2 "which directory" ${cmd})
  expect(2 "unexpected argument" ${cmd} "${WORK}/plain" "${WORK}/damaged")
  expect(1 "${WORK}/plain is not a kvtier spill directory" ${cmd} "${WORK}/plain")
  expect(1 "${WORK}/plain is not a kvtier spill directory" ${cmd} --json "${WORK}/plain")
  expect(1 "cannot open ${WORK}/missing" ${cmd} "${WORK}/missing")
  expect(1 "KVTIER is damaged" ${cmd} "${WORK}/damaged")
endforeach()
expect(2 "no --repair" inspect --repair "${WORK}/plain")
expect(1 "not a kvtier spill directory" fsck --repair "${WORK}/plain")
if(EXISTS "${WORK}/plain/LOCK")
  message(FATAL_ERROR "fsck --repair created a file in a directory that is not a spill directory")
endif()

# The top-level help lists both commands.
execute_process(COMMAND ${KVTIER} --help OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "inspect DIR" OR NOT out MATCHES "fsck DIR")
  message(FATAL_ERROR "kvtier --help does not list inspect and fsck: ${out}")
endif()
message(STATUS "inspect/fsck error paths ok")
