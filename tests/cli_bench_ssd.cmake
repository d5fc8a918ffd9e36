# `kvtier bench ssd` never runs a shell and never touches what it did not
# make: a --dir holding a quote and shell commands is only a directory name
# (no PWNED file appears; the JSON names it intact), the bench's own
# directory inside it is gone afterwards and nothing else there changed,
# and an empty --dir is an argument error. --api get runs and reports its
# one link per page size; bad --api, --page and --chain values are argument
# errors naming the option.
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

string(JSON cpu GET "${out}" links 1 cpu_s_per_gb)
if(NOT cpu GREATER 0)
  message(FATAL_ERROR "ssd->dram cpu_s_per_gb is '${cpu}', want > 0: ${out}")
endif()
# ssd->dram also against raw reads of the engine's own segment, right after
string(JSON sbase GET "${out}" links 1 segment_baseline_gbps)
string(JSON sratio GET "${out}" links 1 segment_ratio)
if(NOT sbase GREATER 0 OR NOT sratio GREATER 0)
  message(FATAL_ERROR "ssd->dram segment baseline '${sbase}', ratio '${sratio}', want > 0: ${out}")
endif()
string(JSON wseg ERROR_VARIABLE none GET "${out}" links 0 segment_ratio)
if(none STREQUAL "NOTFOUND")
  message(FATAL_ERROR "dram->ssd has a segment_ratio '${wseg}': only reads are measured so: ${out}")
endif()

# --api get: kvt_get of SSD-only pages, one link per page size, every page
# checked by the bench (it exits 1 on a wrong or missing one).
execute_process(COMMAND ${KVTIER} bench ssd --quick --json --api get --page 64K --chain 4
                --dir "${WORK}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvtier bench ssd --api get --quick exited ${rc}: ${err}")
endif()
string(JSON api GET "${out}" api)
string(JSON nlinks LENGTH "${out}" links)
string(JSON link GET "${out}" links 0 link)
string(JSON chain GET "${out}" links 0 chain)
string(JSON block GET "${out}" links 0 block_bytes)
string(JSON ratio GET "${out}" links 0 ratio)
string(JSON bratio GET "${out}" links 0 batched_ratio)
if(NOT api STREQUAL "get" OR NOT nlinks EQUAL 1 OR NOT link STREQUAL "ssd->get" OR
   NOT chain EQUAL 4 OR NOT block EQUAL 65536 OR NOT ratio GREATER 0 OR NOT bratio GREATER 0)
  message(FATAL_ERROR "bench ssd --api get: unexpected JSON: ${out}")
endif()
foreach(bad "--api;put" "--page;5000" "--chain;0")
  execute_process(COMMAND ${KVTIER} bench ssd --quick ${bad}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  list(GET bad 0 opt)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "${opt}")
    message(FATAL_ERROR "bench ssd ${bad}: exit ${rc}, want 2 naming ${opt}: ${err}")
  endif()
endforeach()

# An empty --dir would have put the bench's directory in /.
execute_process(COMMAND ${KVTIER} bench ssd --quick --dir=
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--dir")
  message(FATAL_ERROR "bench ssd --dir '': exit ${rc}, want 2 naming --dir: ${err}")
endif()
message(STATUS "bench ssd: no shell, its directory removed, nothing else touched")
