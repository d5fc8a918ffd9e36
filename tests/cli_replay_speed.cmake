# `kvtier replay --speed S`: a request stamped earlier than the first one is
# due at once (the trace format allows it; an unsigned difference made it
# a sleep of 2^64 ms), and S out of its range is a usage error naming the
# option (1e-300 ran unpaced, 1e-12 never ended).
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# Three requests: the second stamped before the first, the third with it.
file(WRITE "${WORK}/back.jsonl"
     "{\"timestamp\": 5000, \"hash_ids\": [1, 2]}\n"
     "{\"timestamp\": 0, \"hash_ids\": [1, 2, 3]}\n"
     "{\"timestamp\": 5000, \"hash_ids\": [1, 4]}\n")

# The limit only stops a replay that sleeps for ever: paced at 1000x, the
# trace's 5 s take 5 ms.
execute_process(COMMAND ${KVTIER} replay "${WORK}/back.jsonl" --speed 1000 --block-bytes 64K
                        --capacity 4M --no-progress --json
                TIMEOUT 60 OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--speed 1000 on a trace that goes back in time: exit '${rc}' "
                      "(want 0, at once)\n${err}")
endif()
string(JSON n GET "${out}" requests)
string(JSON hits GET "${out}" hit_blocks)
if(NOT n EQUAL 3 OR NOT hits EQUAL 3)
  message(FATAL_ERROR "want 3 requests and 3 hit blocks (2 + 1), got ${n} and ${hits}\n${out}")
endif()

# bad_speed(<value>): exit 2 at once, naming --speed and the range.
function(bad_speed v)
  execute_process(COMMAND ${KVTIER} replay "${WORK}/back.jsonl" --speed ${v} --block-bytes 64K
                          --capacity 4M --no-progress
                  TIMEOUT 60 OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "--speed: expected max, or a number from 0.001")
    message(FATAL_ERROR "--speed ${v}: want exit 2 naming --speed and its range, got '${rc}'\n${err}")
  endif()
endfunction()
foreach(v 1e-300 1e-12 0.0009 0 1e10 inf nan -1)
  bad_speed(${v})
endforeach()
message(STATUS "--speed: earlier timestamps due at once; out of range refused")
