# Runs `kvtier plan` end to end: --json figures against hand arithmetic, the
# bench file being read, and bad arguments exiting 2 with a message naming them.
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

# An empty cache directory: no bench file, so the links are the stated defaults.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/empty")
set(ENV{XDG_CACHE_HOME} "${WORK}/empty")

function(expect out key want)
  string(JSON got GET "${out}" ${key})
  if(NOT got STREQUAL "${want}")
    message(FATAL_ERROR "${key}: got '${got}', want '${want}'\n${out}")
  endif()
endfunction()

# CMake compares numbers as doubles; its JSON reader reprints them.
function(expect_between out key lo hi)
  string(JSON got GET "${out}" ${key})
  if(NOT got GREATER ${lo} OR NOT got LESS ${hi})
    message(FATAL_ERROR "${key}: got '${got}', want between ${lo} and ${hi}\n${out}")
  endif()
endfunction()

function(plan_json out_var)
  execute_process(COMMAND ${KVTIER} plan ${ARGN} --json
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier plan ${ARGN} exited ${rc}: ${err}")
  endif()
  if(NOT err MATCHES "kvtier plan: ")
    message(FATAL_ERROR "with --json the human text belongs on stderr; got: ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# llama3-8b bf16: 2 x 32 layers x 8 kv heads x 128 dims x 2 B = 131072 B/token;
# 32k context x batch 4 = 4 x 32768 x 131072 = 16 GiB over 8 GiB HBM + 16 GiB DRAM.
plan_json(out --model llama3-8b --context 32k --batch 4 --hbm 8G --dram 16G)
math(EXPR total "4 * 32768 * 131072")
math(EXPR half "8 * 1024 * 1024 * 1024")
expect("${out}" kv_bytes_per_token 131072)
expect("${out}" kv_bytes_per_sequence 4294967296)
expect("${out}" kv_bytes_total ${total})
expect("${out}" "split;hbm" ${half})
expect("${out}" "split;dram" ${half})
expect("${out}" "split;ssd" 0)
expect("${out}" "split;unplaced" 0)
expect("${out}" bound_by h2d)
expect("${out}" "gbps_source;h2d" assumed)
# 8 GiB over the assumed 50 GB/s link: 2^33 / 50e9 = 0.17179869184 s;
# 4 sequences / that = 23.2830643 tokens/s
expect_between("${out}" bound_s 0.1717986 0.1717988)
expect_between("${out}" tokens_per_s_bound 23.28306 23.28307)
string(JSON nassume LENGTH "${out}" assumptions)
if(nassume LESS 3)
  message(FATAL_ERROR "expected the assumptions listed, got ${nassume}")
endif()

# MLA, quantised: (512 + 64) x 61 layers x 1 B (fp8) = 35136 B/token.
plan_json(out --model deepseek-v3 --dtype fp8 --context 1k)
expect("${out}" kv_bytes_per_token 35136)
expect("${out}" attn mla)

# What does not fit is reported, and there is no bound.
plan_json(out --model llama3-8b --context 1m --hbm 80G)
math(EXPR unplaced "1048576 * 131072 - 80 * 1024 * 1024 * 1024")
expect("${out}" "split;unplaced" ${unplaced})
string(JSON t TYPE "${out}" bound_s)
if(NOT t STREQUAL "NULL")
  message(FATAL_ERROR "bound_s should be null when the KV does not fit: ${out}")
endif()

# A bench file, when present, gives the links no flag gives.
file(WRITE "${WORK}/cache/kvtier/bench.json" "{\"h2d_gbps\": 25.5, \"ssd_read_gbps\": 3}\n")
set(ENV{XDG_CACHE_HOME} "${WORK}/cache")
plan_json(out --model llama3-8b --context 32k --ssd-gbps 7)
expect("${out}" "gbps;h2d" 25.5)
expect("${out}" "gbps_source;h2d" bench)
expect("${out}" "gbps;ssd" 7)
expect("${out}" "gbps_source;ssd" given)
set(ENV{XDG_CACHE_HOME} "${WORK}/empty")

# Bad arguments: exit 2 and a message naming the argument.
function(expect_bad pattern)
  execute_process(COMMAND ${KVTIER} plan ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "kvtier plan ${ARGN}: rc ${rc} (want 2), stderr: ${err}")
  endif()
endfunction()
expect_bad("banana.*--context" --model llama3-8b --context banana)
expect_bad("--context" --model llama3-8b --context 0)
expect_bad("llama9.*deepseek-v3" --model llama9 --context 1k)
expect_bad("missing shape" --layers 32 --context 1k)
expect_bad("--kv-lora-rank" --model llama3-8b --kv-lora-rank 512 --context 1k)
expect_bad("fp6.*--dtype" --model llama3-8b --context 1k --dtype fp6)
message(STATUS "kvtier plan ok")
