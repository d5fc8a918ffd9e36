# Runs `kvtier bench hbm --quick --json` and checks that stdout
# is one JSON object with the three links (each way alone, both at once) and
# positive figures.
# On the device KVT_TEST_DEVICE names (the mock build's CUDA back-end, a GPU
# in tools/gpu/check.sh), else the host.
set(dev host)
if(DEFINED ENV{KVT_TEST_DEVICE} AND NOT "$ENV{KVT_TEST_DEVICE}" STREQUAL "")
  set(dev "$ENV{KVT_TEST_DEVICE}")
endif()
execute_process(COMMAND ${KVTIER} bench hbm --quick --json --device ${dev}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvtier bench hbm exited ${rc}: ${err}")
endif()
string(JSON nlinks LENGTH "${out}" links)
if(NOT nlinks EQUAL 3)
  message(FATAL_ERROR "expected 3 links, got ${nlinks}: ${out}")
endif()
set(names "")
foreach(i 0 1 2)
  string(JSON link GET "${out}" links ${i} link)
  string(JSON ratio GET "${out}" links ${i} ratio)
  string(JSON gbps GET "${out}" links ${i} gbps)
  if(NOT gbps GREATER 0 OR NOT ratio GREATER 0)
    message(FATAL_ERROR "link ${link}: gbps ${gbps} ratio ${ratio}")
  endif()
  string(APPEND names "${link};")
endforeach()
if(NOT names STREQUAL "dram->hbm;hbm->dram;both;")
  message(FATAL_ERROR "links are ${names}")
endif()
# Both at once: each direction moved bytes, through kvtier (so pages
# released dirty were written back while others loaded) and in the baseline.
foreach(f up_gbps down_gbps baseline_up_gbps baseline_down_gbps)
  string(JSON v GET "${out}" links 2 ${f})
  if(NOT v GREATER 0)
    message(FATAL_ERROR "both: ${f} is ${v}: ${out}")
  endif()
  set(${f} ${v})
endforeach()
string(JSON ops GET "${out}" acquire_release_per_s)
if(NOT ops GREATER 0)
  message(FATAL_ERROR "acquire_release_per_s is ${ops}")
endif()
# Bad arguments give a clear error and exit code 2.
execute_process(COMMAND ${KVTIER} bench hbm --page-bytes banana
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "banana")
  message(FATAL_ERROR "bad --page-bytes: rc ${rc}, stderr: ${err}")
endif()
message(STATUS "bench hbm JSON ok: ${out}")
