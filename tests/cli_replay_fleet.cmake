# `kvtier replay --instances N [--remote URL]` end to end on a trace small
# enough to work out by hand: two engines, requests dealt in turn.
#   req 0 [A B] -> engine 0, req 1 [A B] -> 1, req 2 [A B C] -> 0, req 3 [A B C] -> 1
# Separate caches: req 2 and req 3 hit A B on their own engine: 4 of 10.
# Shared: req 1 finds A B in the cluster, req 2 A B locally, req 3 A B
# locally and C in the cluster (req 2 published it): 7 of 10, 3 of them
# from the cluster. Every byte verified. Bad arguments exit 2, and a
# password in the URL is refused without being echoed. Called with
# -DKVTIER=<the command> -DWORK=<a scratch directory> [-DURL=<a cluster>].

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/t.jsonl"
  "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [11, 12]}\n"
  "{\"timestamp\": 1, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": [11, 12]}\n"
  "{\"timestamp\": 2, \"input_length\": 1536, \"output_length\": 1, \"hash_ids\": [11, 12, 13]}\n"
  "{\"timestamp\": 3, \"input_length\": 1536, \"output_length\": 1, \"hash_ids\": [11, 12, 13]}\n")

function(run_json out_var)
  execute_process(COMMAND ${KVTIER} replay "${WORK}/t.jsonl" --instances 2 --capacity 64M --json
                          ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier replay --instances 2 ${ARGN} exited ${rc}: ${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(expect out want)
  string(JSON got GET "${out}" ${ARGN})
  if(NOT got STREQUAL "${want}")
    message(FATAL_ERROR "${ARGN}: got '${got}', want '${want}'\n${out}")
  endif()
endfunction()

function(expect_refused want)
  execute_process(COMMAND ${KVTIER} replay "${WORK}/t.jsonl" ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${want}")
    message(FATAL_ERROR "replay ${ARGN}: exit ${rc} (want 2), stderr '${err}' (want ${want})")
  endif()
  if(err MATCHES "hunter2")
    message(FATAL_ERROR "replay ${ARGN}: the password was echoed: ${err}")
  endif()
endfunction()

run_json(out)
expect("${out}" 2 instances)
expect("${out}" 10 separate block_refs)
expect("${out}" 4 separate hit_blocks)
expect("${out}" ON separate verified)

if(URL)
  run_json(out --remote "${URL}")
  expect("${out}" 4 separate hit_blocks)
  expect("${out}" 7 shared hit_blocks)
  expect("${out}" 3 shared hits_remote)
  expect("${out}" 3 shared published)
  expect("${out}" 0 shared remote_corrupt)
  expect("${out}" ON shared verified)
  # Publishing on reuse: nothing was hit twice on one engine before req 3.
  run_json(out --remote "${URL}" --publish reuse)
  expect("${out}" 4 shared hit_blocks)
endif()

expect_refused("--publish.*need --remote" --instances 2 --publish put)
expect_refused("--ssd is not for" --instances 2 --ssd 0)
expect_refused("not shown: it holds credentials" --remote "redis://u:hunter2@127.0.0.1:1")
expect_refused("--instances" --instances 0)
