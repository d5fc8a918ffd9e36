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
# The attention threads yield to the I/O threads by default (tools/run/run.h).
string(JSON nice GET "${out}" nice)
if(NOT nice EQUAL 19)
  message(FATAL_ERROR "attention nice ${nice}, want the default 19: ${out}")
endif()
# Each link's speed in the bound is at least what the decode itself moved on
# it, so no term exceeds the wall time and wall/bound is never below 1.
foreach(l "dram->hbm" "hbm->dram" "ssd->dram" "dram->ssd")
  string(JSON got GET "${out}" decode_links_gbps ${l})
  string(JSON used GET "${out}" bound_links_gbps ${l})
  string(JSON raw GET "${out}" links_gbps ${l})
  if(used LESS got OR used LESS raw)
    message(FATAL_ERROR "link ${l}: bound uses ${used} GB/s, decode moved ${got}, raw ${raw}")
  endif()
endforeach()
string(JSON ratio GET "${out}" bound_ratio)
if(ratio LESS 0.999)
  message(FATAL_ERROR "wall/bound ${ratio} < 1: ${out}")
endif()
file(READ ${WORK}.trace.json trace)
string(JSON n LENGTH "${trace}" traceEvents)
if(n LESS 10)
  message(FATAL_ERROR "trace has ${n} events")
endif()
# After the 8 metadata events (process and track names) come timed ones;
# tests/python/test_trace.py checks every event against the format.
string(JSON ph GET "${trace}" traceEvents 7 ph)
string(JSON name GET "${trace}" traceEvents 7 args name)
if(NOT ph STREQUAL "M" OR NOT name STREQUAL "attention")
  message(FATAL_ERROR "trace event 7 is ${ph} ${name}, not the attention track's name")
endif()
string(JSON ph GET "${trace}" traceEvents 8 ph)
string(JSON ts GET "${trace}" traceEvents 8 ts)
if(NOT ph MATCHES "^[XC]$")
  message(FATAL_ERROR "trace event 8 has phase ${ph}")
endif()

# The shapes beyond GQA (docs/run.md): falcon-7b's 71 q heads on one K/V
# head; deepseek-v3's MLA with int4 pages and a window. Each verified over
# three tiers (pages read up from the SSD during the decode), the engine
# holding the window's pages only, the int4 error within its tolerance.
foreach(args "--model;falcon-7b"
             "--model;deepseek-v3;--dtype;int4;--window;100;--page-tokens;16;--tokens;8")
  execute_process(COMMAND ${KVTIER} run ${small} --json ${args}
                  OUTPUT_VARIABLE o ERROR_VARIABLE e RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier run ${args} exited ${rc}: ${e}")
  endif()
  string(JSON verified GET "${o}" verified)
  string(JSON ssd_out GET "${o}" tiers ssd bytes_out)
  string(JSON held GET "${o}" pages_held)
  string(JSON expected GET "${o}" pages_expected)
  if(NOT verified OR NOT ssd_out GREATER 0 OR NOT held EQUAL expected)
    message(FATAL_ERROR "${args}: verified ${verified}, ssd out ${ssd_out}, pages ${held} of ${expected}: ${o}")
  endif()
  if(args MATCHES "window")
    string(JSON dropped GET "${o}" pages_dropped)
    string(JSON err GET "${o}" dtype_error rms_rel_worst_step)
    string(JSON tol GET "${o}" dtype_error tolerance)
    if(NOT dropped GREATER 0 OR err GREATER tol OR NOT err GREATER 0)
      message(FATAL_ERROR "${args}: ${dropped} pages dropped, error ${err} (tolerance ${tol}): ${o}")
    endif()
  endif()
endforeach()

# Bad arguments: exit 2, the message names the value and the option.
foreach(bad "--context;banana" "--hbm;4X" "--policy;fifo" "--model;gpt-9" "--nice;20" "--dtype;int3")
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
