# Option forms and values the commands must refuse or take exactly, end to
# end: --opt=value of every kind; lists with an empty item; a fractional
# block count; a policy that has nothing to say on a prefix trace; a
# recompute rate that made the JSON say "inf"; a directory kvtier did not
# make given to crashtest. Each refusal exits 2 with a message naming what
# is wrong. Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/foreign")
file(WRITE "${WORK}/foreign/note.txt" "mine\n")

# bad(<text stderr must hold> <args...>): exit 2 and stderr holding the text.
function(bad want)
  execute_process(COMMAND ${KVTIER} ${ARGN} WORKING_DIRECTORY "${WORK}" TIMEOUT 120
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 2 OR at LESS 0)
    message(FATAL_ERROR "kvtier ${ARGN}: want exit 2 and '${want}' on stderr, "
                        "got exit ${rc}\nstderr: ${err}")
  endif()
endfunction()

# ok(<out var> <args...>): exit 0; stdout in out var.
function(ok out_var)
  execute_process(COMMAND ${KVTIER} ${ARGN} WORKING_DIRECTORY "${WORK}" TIMEOUT 120
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier ${ARGN}: exit ${rc}\nstderr: ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# A flag given a value ("unknown option '-j'" before), an option whose value
# is a number above 255 among the options (sim's), and --opt=value taken.
bad("option '--json' takes no value" run --json=1)
bad("option '--json' takes no value" sim --json=1)
bad("option '--cold' takes no value" sim --cold=yes)
bad("option '--quick' takes no value" bench hbm --quick=1)
bad("option '--json' takes no value" plan --model llama3-8b --context 1k --json=true)
bad("option '--progress' takes no value" replay t.jsonl --progress=1)
bad("option '--json' takes no value" crashtest --json=)
bad("option '--context' needs a value" plan --model llama3-8b --context)
bad("unknown option '--nosuch'" run --nosuch=1)
bad("unknown option '-x'" run -x)
ok(out plan --model=llama3-8b --context=32k --batch=2 --json)
string(JSON batch GET "${out}" batch)
if(NOT batch EQUAL 2)
  message(FATAL_ERROR "plan --batch=2: batch ${batch}\n${out}")
endif()

# sim's prefix-cache lists: an empty item is not skipped, a block count is
# whole, decode (which plans decode loops) is refused.
# 50 requests of two blocks each, 100 distinct: every capacity below holds
# a request.
set(T "${WORK}/t.jsonl")
set(trace "")
foreach(i RANGE 0 49)
  math(EXPR a "2 * ${i}")
  math(EXPR b "2 * ${i} + 1")
  string(APPEND trace "{\"timestamp\": ${i}, \"hash_ids\": [${a}, ${b}]}\n")
endforeach()
file(WRITE "${T}" "${trace}")
bad("--capacity" sim --trace ${T} --capacity 0.05,,0.1)
bad("--capacity" sim --trace ${T} --capacity ,0.1)
bad("--capacity" sim --trace ${T} --capacity 0.1,)
bad("--capacity" sim --trace ${T} --capacity 2.5)
bad("--policies" sim --trace ${T} --policies decode)
bad("--policies" sim --trace ${T} --policies lru,,arc)
bad("--policies" sim --policies lru,,belady)
ok(out sim --trace ${T} --capacity 0.5,3 --policies lru,belady --json)
string(JSON c GET "${out}" results 2 capacity_blocks)
if(NOT c EQUAL 3)
  message(FATAL_ERROR "--capacity 3: capacity_blocks ${c}, want 3\n${out}")
endif()

# replay's recompute rate: 1e-36 tokens/s made the TTFT figures inf. The
# lowest rate it takes, on requests of 2^32 - 1 tokens, still gives JSON
# numbers only.
bad("--prefill-tokens-per-s" replay ${T} --block-bytes 64K --capacity 4M --prefill-tokens-per-s 1e-36)
bad("--prefill-tokens-per-s" replay ${T} --block-bytes 64K --capacity 4M --prefill-tokens-per-s 0.5)
file(WRITE "${WORK}/long.jsonl"
     "{\"timestamp\": 0, \"input_length\": 4294967295, \"hash_ids\": [1, 2]}\n"
     "{\"timestamp\": 5, \"input_length\": 4294967295, \"hash_ids\": [1, 2, 3]}\n")
ok(out replay "${WORK}/long.jsonl" --prefill-tokens-per-s 1 --block-bytes 64K --capacity 4M
   --no-progress --json)
if(out MATCHES "[^a-z_\"](inf|nan|INF|NAN)")
  message(FATAL_ERROR "replay --json printed a non-finite number\n${out}")
endif()
string(JSON p90 GET "${out}" ttft p90_recompute_s)
if(NOT p90 GREATER 4e9)
  message(FATAL_ERROR "p90_recompute_s ${p90}, want about 2^32 s\n${out}")
endif()

# crashtest on a directory kvtier did not make: exit 2 saying what is in
# it (not the library's "see kvt_last_error"), nothing changed.
execute_process(COMMAND ${KVTIER} crashtest --dir "${WORK}/foreign" --cycles 1 TIMEOUT 120
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--dir ${WORK}/foreign: .*note.txt" OR err MATCHES "kvt_last_error")
  message(FATAL_ERROR "crashtest on a foreign --dir: want exit 2 naming note.txt, got ${rc}\n${err}")
endif()
file(GLOB left RELATIVE "${WORK}/foreign" "${WORK}/foreign/*")
if(NOT left STREQUAL "note.txt")
  message(FATAL_ERROR "crashtest changed a foreign --dir: it holds '${left}'")
endif()
message(STATUS "option forms and values: refused naming them, or taken")
