# Runs `kvtier replay` end to end on a small trace written here: --json has
# the issue's keys, every byte read back was verified, the hit fraction is
# the one worked out by hand (everything fits), DRAM and SSD both hold
# blocks, --trace writes Chrome trace JSON; bad arguments exit 2 naming the
# option; a malformed trace exits 1 naming the line. Called with
# -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# 8 conversations of 6 turns, turn after turn: request (c, t) is a shared
# system-prompt block (1000) and conversation c's first 2(t + 1) blocks.
# With room for all 97 blocks, (c, t) hits 1 + 2t blocks, except the very
# first request (0) and the other first turns (1): 287 of 384 references.
set(trace "")
foreach(t RANGE 0 5)
  foreach(c RANGE 0 7)
    math(EXPR n "2 * (${t} + 1)")
    set(ids "1000")
    foreach(k RANGE 1 ${n})
      math(EXPR id "${c} * 100 + ${k}")
      string(APPEND ids ", ${id}")
    endforeach()
    math(EXPR ts "(${t} * 8 + ${c}) * 5")
    math(EXPR in "(${n} + 1) * 512 - 100")
    string(APPEND trace "{\"timestamp\": ${ts}, \"input_length\": ${in}, \"output_length\": 10, \"hash_ids\": [${ids}]}\n")
  endforeach()
endforeach()
file(WRITE "${WORK}/t.jsonl" "${trace}")

function(replay_json out_var)
  execute_process(COMMAND ${KVTIER} replay ${ARGN} --json
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier replay ${ARGN} exited ${rc}: ${err}")
  endif()
  if(NOT err MATCHES "kvtier replay: ")
    message(FATAL_ERROR "with --json the human text belongs on stderr; got: ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(expect out key want)
  string(JSON got GET "${out}" ${key})
  if(NOT got STREQUAL "${want}")
    message(FATAL_ERROR "${key}: got '${got}', want '${want}'\n${out}")
  endif()
endfunction()

function(expect_positive out)
  string(JSON got GET "${out}" ${ARGN})
  if(NOT got GREATER 0)
    message(FATAL_ERROR "${ARGN}: got '${got}', want > 0\n${out}")
  endif()
endfunction()

replay_json(out "${WORK}/t.jsonl" --block-bytes 64K --capacity 1 --ssd-dir "${WORK}/spill"
            --trace "${WORK}/trace.json")
expect("${out}" verified ON)
expect("${out}" requests 48)
expect("${out}" block_refs 384)
expect("${out}" distinct_blocks 97)
expect("${out}" capacity_blocks 97)
expect("${out}" hit_blocks 287)
expect("${out}" client_evicted_blocks 0)
string(JSON hf GET "${out}" hit_fraction)
if(NOT hf MATCHES "^0\\.7473")
  message(FATAL_ERROR "hit_fraction ${hf}, want 287/384 = 0.7474\n${out}")
endif()
math(EXPR verified_bytes "287 * 65536")
expect("${out}" bytes_verified ${verified_bytes})
expect("${out}" "slots;dram" 24)
expect("${out}" "slots;ssd" 72)
expect("${out}" "slots;hbm" 1)
# string(JSON GET) fails on a missing key: the issue's keys are all there.
foreach(key policy capacity_blocks hit_fraction verified ssd_bytes_written load_gbps raw_gbps
            raw_batched_gbps raw_batch raw_same_gbps raw_same_blocks)
  string(JSON got GET "${out}" ${key})
endforeach()
expect_positive("${out}" ssd_bytes_written)
# The SSD-served gets' own reads, replayed raw: at most one per SSD hit.
string(JSON same GET "${out}" raw_same_blocks)
string(JSON ssd_hits GET "${out}" hits_by_tier ssd)
if(same GREATER ssd_hits OR (ssd_hits GREATER 0 AND same EQUAL 0))
  message(FATAL_ERROR "raw_same_blocks ${same} against ${ssd_hits} SSD-served blocks\n${out}")
endif()
expect_positive("${out}" load_gbps)
expect_positive("${out}" "hits_by_tier;dram")
expect_positive("${out}" "ttft;requests_with_hit")
# The spill directory given is kvtier's now, and a second run may use it.
if(NOT EXISTS "${WORK}/spill/KVTIER")
  message(FATAL_ERROR "--ssd-dir ${WORK}/spill holds no layout file")
endif()

# The trace is JSON with the requests' calls and the disk's transfers.
file(READ "${WORK}/trace.json" tj)
string(JSON nev LENGTH "${tj}" traceEvents)
set(names "")
math(EXPR last "${nev} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${tj}" traceEvents ${i} name)
  list(APPEND names "${name}")
endforeach()
foreach(want exists put "get dram" "dram->ssd")
  list(FIND names "${want}" at)
  if(at LESS 0)
    message(FATAL_ERROR "--trace has no '${want}' event")
  endif()
endforeach()

# --requests cuts the trace; --policy is the engine's.
# --requests cuts the trace (8 first turns, then conversation 0's second:
# 7 + 3 hits); --dram and --ssd in bytes and the HBM slot make the capacity;
# --policy is the engine's.
replay_json(out "${WORK}/t.jsonl" --block-bytes 64K --dram 512K --ssd 640K --requests 9
            --policy lru --no-progress)
expect("${out}" requests 9)
expect("${out}" policy lru)
expect("${out}" policy_default OFF)
expect("${out}" distinct_blocks 19)
expect("${out}" capacity_blocks 19)
expect("${out}" hit_blocks 10)

# --concurrency: the requests served by 3 threads at once, every byte
# verified, every reference counted, most hits still found.
replay_json(out "${WORK}/t.jsonl" --block-bytes 64K --capacity 1 --concurrency 3 --no-progress)
expect("${out}" verified ON)
expect("${out}" concurrency 3)
expect("${out}" block_refs 384)
string(JSON hb GET "${out}" hit_blocks)
if(hb LESS 144)
  message(FATAL_ERROR "--concurrency 3: hit_blocks ${hb}, want 144 or more (287 one at a time)\n${out}")
endif()

# Bad arguments: exit 2, and the message names the option.
function(expect_usage_error opt)
  execute_process(COMMAND ${KVTIER} replay ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${opt}")
    message(FATAL_ERROR "kvtier replay ${ARGN}: want exit 2 naming ${opt}, got ${rc}: ${err}")
  endif()
endfunction()
set(T "${WORK}/t.jsonl")
expect_usage_error("TRACE")
expect_usage_error("--capacity" ${T} --capacity 0)
expect_usage_error("--capacity" ${T} --capacity 2x)
expect_usage_error("--dram" ${T} --dram -1)
expect_usage_error("--block-bytes" ${T} --block-bytes 5000)
expect_usage_error("--speed" ${T} --speed 0)
expect_usage_error("--concurrency" ${T} --concurrency 0)
expect_usage_error("--concurrency" ${T} --concurrency 65)
expect_usage_error("--model" ${T} --model nosuch)
expect_usage_error("--policy" ${T} --capacity 1 --policy nosuch)
expect_usage_error("--bogus" ${T} --bogus)
expect_usage_error("unexpected argument" ${T} ${T})
expect_usage_error("give two of them" ${T} --capacity 0.5 --dram 0.1 --ssd 0.2)
expect_usage_error("DRAM" ${T} --capacity 0.1)

# A malformed trace: exit 1, and the message names the line.
file(WRITE "${WORK}/bad.jsonl" "{\"timestamp\": 1, \"hash_ids\": [1, 2]}\n\n{\"timestamp\": 2, \"hash_ids\": [1, 2,]}\n")
execute_process(COMMAND ${KVTIER} replay "${WORK}/bad.jsonl" ERROR_VARIABLE err
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 1 OR NOT err MATCHES "line 3")
  message(FATAL_ERROR "malformed trace: want exit 1 naming line 3, got ${rc}: ${err}")
endif()
execute_process(COMMAND ${KVTIER} replay "${WORK}/missing.jsonl" ERROR_VARIABLE err
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 1 OR NOT err MATCHES "missing.jsonl")
  message(FATAL_ERROR "a missing trace: want exit 1 naming it, got ${rc}: ${err}")
endif()
