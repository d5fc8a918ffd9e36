# `kvtier bench ssd` never runs a shell and never touches what it did not
# make: a --dir holding a quote and shell commands is only a directory name
# (no PWNED file appears; the JSON names it intact), the bench's own
# directory inside it is gone afterwards and nothing else there changed,
# and an empty --dir is an argument error.
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
set(evil "x'; touch PWNED; echo '")
file(MAKE_DIRECTORY "${WORK}/${evil}")
file(WRITE "${WORK}/${evil}/keep.txt" "mine\n")

execute_process(COMMAND ${KVTIER} bench ssd --quick --json --dir "${evil}"
                WORKING_DIRECTORY "${WORK}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
file(GLOB_RECURSE pwned "${WORK}/*PWNED*")
if(pwned OR EXISTS "${WORK}/PWNED")
  message(FATAL_ERROR "a shell ran on --dir: ${pwned}")
endif()
file(GLOB left RELATIVE "${WORK}/${evil}" "${WORK}/${evil}/*")
if(NOT left STREQUAL "keep.txt")
  message(FATAL_ERROR "--dir holds '${left}' after the bench, want only keep.txt")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvtier bench ssd --quick exited ${rc}: ${err}")
endif()
string(JSON dir GET "${out}" dir)
if(NOT dir STREQUAL "${evil}")
  message(FATAL_ERROR "JSON dir is '${dir}', want '${evil}'")
endif()
string(JSON nlinks LENGTH "${out}" links)
if(NOT nlinks EQUAL 4)
  message(FATAL_ERROR "expected 4 links, got ${nlinks}: ${out}")
endif()

# An empty --dir would have put the bench's directory in /.
execute_process(COMMAND ${KVTIER} bench ssd --quick --dir=
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--dir")
  message(FATAL_ERROR "bench ssd --dir '': exit ${rc}, want 2 naming --dir: ${err}")
endif()
message(STATUS "bench ssd: no shell, its directory removed, nothing else touched")
