# `kvtier crashtest` end to end: its argument checks, a directory it must
# refuse, and the crash loop itself: 50 SIGKILL cycles, every key checked
# after each, none lost or wrong (the JSON says so and the exit is 0).
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/foreign" "${WORK}/loop")
file(WRITE "${WORK}/foreign/notes.txt" "not kvtier's\n")

# expect(<exit code> <regex stderr must match> <args...>)
function(expect want_rc want_err)
  execute_process(COMMAND ${KVTIER} crashtest ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR
            "kvtier crashtest ${ARGN}: exit ${rc}, want ${want_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  if(NOT err MATCHES "${want_err}")
    message(FATAL_ERROR "kvtier crashtest ${ARGN}: stderr does not match '${want_err}': ${err}")
  endif()
endfunction()

execute_process(COMMAND ${KVTIER} crashtest --help OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: kvtier crashtest")
  message(FATAL_ERROR "kvtier crashtest --help: exit ${rc}, stdout: ${out}")
endif()
expect(2 "--cycles: expected a whole number from 1" --cycles 0)
expect(2 "--cycles" --cycles 12x)
expect(2 "--keys: expected a whole number from 1 to 4096" --keys 5000)
expect(2 "--max-ms" --max-ms=-3)
expect(2 "--dir" --dir "")
expect(2 "unknown option '--bogus'" --bogus)
expect(2 "unexpected argument 'extra'" extra)
expect(2 "--dir ${WORK}/foreign: .*notes.txt" --dir "${WORK}/foreign" --cycles 1)

execute_process(COMMAND ${KVTIER} crashtest --cycles 50 --dir "${WORK}/loop" --json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message(STATUS "${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvtier crashtest --cycles 50: exit ${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
foreach(want "\"cycles\": 50," "\"lost\": 0," "\"wrong\": 0," "\"ok\": true,")
  string(FIND "${out}" "${want}" at)
  if(at LESS 0)
    message(FATAL_ERROR "kvtier crashtest --json lacks ${want}: ${out}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
