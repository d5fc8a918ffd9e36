# Bad arguments to every subcommand: each exits 2 with a message on stderr
# naming the option, before any engine is opened or anything is made on disk
# (tools/cli.c's strict parsers, and the library's own kvt_config_check run
# on the configuration first). An empty value is written --opt= (an empty
# argument would vanish from a CMake list).
# Called with -DKVTIER=<the command> -DWORK=<a scratch directory>.

file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# bad(<text stderr must hold> <args...>): exit 2 and stderr holding the text.
# The time limit only stops a command that goes on to run: none of these
# should get that far.
function(bad want)
  execute_process(COMMAND ${KVTIER} ${ARGN} WORKING_DIRECTORY "${WORK}" TIMEOUT 120
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 2 OR at LESS 0)
    message(FATAL_ERROR "kvtier ${ARGN}: want exit 2 and '${want}' on stderr, "
                        "got exit ${rc}\nstderr: ${err}")
  endif()
endfunction()

# bench hbm: numbers that are not numbers, and sizes below what the engine
# or the benchmark needs (checked before the engine opens).
bad("--link-gbps" bench hbm --device host --link-gbps abc)
bad("--link-gbps" bench hbm --device host --link-gbps=)
bad("--link-gbps" bench hbm --device host --link-gbps inf)
bad("--link-gbps" bench hbm --device host --link-gbps nan)
bad("--link-gbps" bench hbm --device host --link-gbps 0x10)
bad("--page-bytes" bench hbm --device host --page-bytes 0)
bad("--page-bytes" bench hbm --device host --page-bytes 5000)
bad("--hbm" bench hbm --device host --hbm 0)
bad("--hbm" bench hbm --device host --hbm " 1M")
bad("--hbm" bench hbm --device host --hbm 1.5)
bad("--hbm" bench hbm --device host --hbm 18446744073709551616)
bad("--hbm" bench hbm --device host --page-bytes 4k --hbm 4k --dram 1M --batch 1)
bad("--hbm" bench hbm --device host --page-bytes 4k --hbm 8k --dram 1M --batch 4)
bad("--dram" bench hbm --device host --dram 1k)
bad("--dram" bench hbm --device host --hbm 32M --dram 64M)
bad("--batch" bench hbm --device host --batch 0)
bad("--device" bench hbm --device 1.5)

# bench ssd
bad("--dir" bench ssd --quick --dir=)
bad("--bytes" bench ssd --quick --bytes 1M)
bad("--bytes" bench ssd --quick --bytes 4X)
bad("--bytes" bench ssd --bytes 256T)
bad("--depth" bench ssd --quick --depth 0)
bad("--depth" bench ssd --quick --depth=)
bad("--reps" bench ssd --quick --reps 1e1)

# run: the engine's minimums, the model's layer count, empty paths. Small
# settings, so that a value let through would still end soon.
set(small --batch 1 --context 64 --tokens 1 --no-progress --device host)
bad("--dram" run ${small} --dram 1k)
bad("--ssd" run ${small} --hbm 64M --dram 64M --ssd 1k)
bad("--layers" run ${small} --layers 999)
bad("--verify-every" run ${small} --verify-every 0)
bad("32 layers" run ${small} --layers 33)
bad("--link-gbps" run ${small} --link-gbps inf)
bad("--link-gbps" run ${small} --link-gbps=)
bad("--ssd-dir" run ${small} --ssd-dir=)
bad("--trace" run ${small} --trace=)
bad("--context" run ${small} --context 0x10)
bad("--seed" run ${small} --seed -1)
# Pages read from SSD pass through DRAM a chunk at a time: one page of DRAM
# for chunks of 32 made kvt_acquire wait for ever.
bad("--dram" run --batch 1 --context 4096 --tokens 1 --no-progress --device host --dram 128k)
# Refused before the spill directory is made.
bad("--dram" run ${small} --ssd-dir "${WORK}/never" --dram 1k)
if(EXISTS "${WORK}/never")
  message(FATAL_ERROR "run with a bad --dram made its --ssd-dir")
endif()

# sim and plan
bad("--layers" sim --layers 999)
bad("--h2d-gbps" sim --h2d-gbps 0x10)
bad("--compute-us" sim --compute-us " 5")
bad("--trace" sim --trace=)
bad("--hbm-gbps" plan --model llama3-8b --context 32k --hbm-gbps 0x10)
bad("--ssd-gbps" plan --model llama3-8b --context 32k --ssd-gbps " 7")
bad("--hbm" plan --model llama3-8b --context 32k --hbm 1.5)

# run on a directory kvtier did not make: exit 2 naming what is in it, and
# nothing there changed or added.
file(MAKE_DIRECTORY "${WORK}/foreign")
file(WRITE "${WORK}/foreign/note.txt" "mine\n")
bad("note.txt" run ${small} --ssd-dir "${WORK}/foreign")
file(GLOB left RELATIVE "${WORK}/foreign" "${WORK}/foreign/*")
file(READ "${WORK}/foreign/note.txt" note)
if(NOT left STREQUAL "note.txt" OR NOT note STREQUAL "mine\n")
  message(FATAL_ERROR "run changed a foreign --ssd-dir: it holds '${left}'")
endif()
message(STATUS "bad arguments: exit 2, named")
