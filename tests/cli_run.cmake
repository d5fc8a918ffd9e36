# `kvtier run` end to end: --json with small settings is verified and moves
# bytes on all three tiers; --trace writes trace-event JSON; a bad argument
# exits 2 naming it.
set(small --layers 2 --batch 2 --context 512 --tokens 3 --no-progress --device host)
execute_process(COMMAND ${KVTIER} run ${small} --json --trace ${WORK}.trace.json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvtier run exited ${rc}: ${err}")
endif()
string(JSON verified GET "${out}" verified)
if(NOT verified)
  message(FATAL_ERROR "not verified: ${out}")
endif()
foreach(t hbm dram ssd)
  string(JSON in GET "${out}" tiers ${t} bytes_in)
  string(JSON outb GET "${out}" tiers ${t} bytes_out)
  if(NOT in GREATER 0 OR NOT outb GREATER 0)
    message(FATAL_ERROR "tier ${t}: bytes in ${in}, out ${outb}: ${out}")
  endif()
endforeach()
foreach(k tokens_per_s kv_bytes stall_fraction bound_s wall_s bound_ratio)
  string(JSON v GET "${out}" ${k})
endforeach()
file(READ ${WORK}.trace.json trace)
string(JSON n LENGTH "${trace}" traceEvents)
if(n LESS 10)
  message(FATAL_ERROR "trace has ${n} events")
endif()
# After the 7 metadata events (process and track names) come timed ones;
# tests/python/test_trace.py checks every event against the format.
string(JSON ph GET "${trace}" traceEvents 7 ph)
string(JSON ts GET "${trace}" traceEvents 7 ts)
if(NOT ph MATCHES "^[XC]$")
  message(FATAL_ERROR "trace event 7 has phase ${ph}")
endif()

# Bad arguments: exit 2, the message names the value and the option.
foreach(bad "--context;banana" "--hbm;4X" "--policy;fifo" "--model;gpt-9")
  list(GET bad 0 opt)
  list(GET bad 1 val)
  execute_process(COMMAND ${KVTIER} run ${opt} ${val}
                  OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT e MATCHES "${val}" OR NOT e MATCHES "${opt}")
    message(FATAL_ERROR "${opt} ${val}: rc ${rc}, stderr: ${e}")
  endif()
endforeach()
execute_process(COMMAND ${KVTIER} run --no-such-option
                OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT e MATCHES "no-such-option")
  message(FATAL_ERROR "unknown option: rc ${rc}, stderr: ${e}")
endif()
message(STATUS "kvtier run JSON ok: ${out}")
