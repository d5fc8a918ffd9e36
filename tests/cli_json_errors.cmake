# With --json, a command that fails prints one JSON object on stdout,
# {"error": "...", "command": "...", "exit": N}, as well as its message on
# stderr: for a bad argument (exit 2) and for a failure (exit 1), whatever
# the command, and wherever --json stands among the arguments. A command
# that succeeds prints its report, and nothing else.
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/foreign")
file(WRITE "${WORK}/foreign/note.txt" "mine\n")
file(WRITE "${WORK}/t.jsonl" "{\"timestamp\": 0, \"hash_ids\": [1, 2]}\n")

# json_error(<exit> <text the error must hold> <args...>)
function(json_error want_rc want)
  execute_process(COMMAND ${KVTIER} ${ARGN} WORKING_DIRECTORY "${WORK}" TIMEOUT 120
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "kvtier ${ARGN}: exit ${rc}, want ${want_rc}\nstderr: ${err}")
  endif()
  string(JSON msg ERROR_VARIABLE bad GET "${out}" error)
  if(bad)
    message(FATAL_ERROR "kvtier ${ARGN}: stdout is not a JSON object with \"error\" (${bad})\n"
                        "stdout: '${out}'\nstderr: ${err}")
  endif()
  string(JSON code GET "${out}" exit)
  string(JSON cmd GET "${out}" command)
  string(FIND "${msg}" "${want}" at)
  if(at LESS 0 OR NOT code EQUAL want_rc OR cmd STREQUAL "")
    message(FATAL_ERROR "kvtier ${ARGN}: want error holding '${want}', exit ${want_rc} and the "
                        "command; got ${out}")
  endif()
  string(FIND "${err}" "${msg}" at)
  if(at LESS 0)
    message(FATAL_ERROR "kvtier ${ARGN}: the message is not on stderr too\nstderr: ${err}")
  endif()
endfunction()

# Bad arguments, one per command (--json first, last, or abbreviated).
json_error(2 "--batch" run --json --batch 0)
json_error(2 "--bogus" run --bogus --json)
json_error(2 "--json" run --json=1)
json_error(2 "--speed" replay t.jsonl --speed 0 --json)
json_error(2 "--policies" sim --trace t.jsonl --policies decode --json)
json_error(2 "--layers" sim --layers 0 --json)
json_error(2 "--context" plan --model llama3-8b --json)
json_error(2 "--page-bytes" bench hbm --device host --page-bytes 0 --json)
json_error(2 "--depth" bench ssd --quick --depth 0 --json)
json_error(2 "unknown benchmark" bench nosuch --json)
json_error(2 "--cycles" crashtest --cycles 0 --jso)
json_error(2 "note.txt" crashtest --dir foreign --cycles 1 --json)
json_error(2 "which directory" fsck --json)
json_error(2 "which directory" inspect --json)
json_error(2 "unknown command" nosuch --json)
# Failures.
json_error(1 "missing.jsonl" replay missing.jsonl --json)
json_error(1 "missing.trace" sim --trace missing.trace --json)
json_error(1 "not a kvtier spill directory" fsck foreign --json)

# Success: the report alone.
execute_process(COMMAND ${KVTIER} plan --model llama3-8b --context 1k --json
                OUTPUT_VARIABLE out RESULT_VARIABLE rc)
string(JSON ctx GET "${out}" context)
string(JSON has ERROR_VARIABLE none GET "${out}" error)
if(NOT rc EQUAL 0 OR NOT ctx EQUAL 1024 OR NOT none)
  message(FATAL_ERROR "plan --json: exit ${rc}, want the report alone: ${out}")
endif()
message(STATUS "--json: an error is one JSON object on stdout")
