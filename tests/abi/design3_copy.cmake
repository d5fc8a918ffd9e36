# Checks that tests/abi/design3.h (COPY) is still, byte for byte, the code
# block of section 3 of the project's original design document (DESIGN_MD),
# which lives beside the repository, not in it (docs/api.md#the-first-published-api):
# without it the test prints SKIP and passes as a skip.
#   cmake -DDESIGN_MD=.../DESIGN.md -DCOPY=tests/abi/design3.h -P design3_copy.cmake
cmake_minimum_required(VERSION 3.18)
if(NOT EXISTS "${DESIGN_MD}")
  message("SKIP: ${DESIGN_MD} not found; tests/abi/design3.h not compared")
  return()
endif()
file(READ "${DESIGN_MD}" md)
string(FIND "${md}" "\n## 3." at)
if(at LESS 0)
  message(FATAL_ERROR "no section 3 in ${DESIGN_MD}")
endif()
string(SUBSTRING "${md}" ${at} -1 md)
set(fence "```c\n")
string(FIND "${md}" "${fence}" begin)
if(begin LESS 0)
  message(FATAL_ERROR "no C code block in section 3 of ${DESIGN_MD}")
endif()
math(EXPR begin "${begin} + 5")
string(SUBSTRING "${md}" ${begin} -1 md)
string(FIND "${md}" "\n```" end)
math(EXPR end "${end} + 1")
string(SUBSTRING "${md}" 0 ${end} block)
file(READ "${COPY}" copy)
if(NOT block STREQUAL copy)
  message(FATAL_ERROR "${COPY} is no longer the code block of section 3 of ${DESIGN_MD}: "
          "copy the block again (tests built against it check the ABI of that version)")
endif()
message(STATUS "tests/abi/design3.h is section 3's code block, verbatim")
