# Configures and builds the CUDA pieces (-DBITPARITY_CUDA=ON) in a side build directory, so
# that the GPU all-to-all keeps compiling on a machine without a GPU, then runs its check:
# exit 0 (exact) or 3 (no usable device) pass, anything else fails. Says it skipped without nvcc.
# Usage: cmake -DSOURCE_DIR=... -DBINARY_DIR=... -P cuda_build_check.cmake
find_program(NVCC nvcc HINTS /usr/local/cuda/bin)
if(NOT NVCC)
  message("cuda build check: skipped, no nvcc on this machine")
  return()
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -G Ninja -DBITPARITY_CUDA=ON
          -DBITPARITY_TESTS=OFF -DBITPARITY_BENCH=OFF -DCMAKE_CUDA_COMPILER=${NVCC} ${CONFIGURE_ARGS}
  RESULT_VARIABLE configure_result)
if(NOT configure_result EQUAL 0)
  message(FATAL_ERROR "cuda build check: configuring with -DBITPARITY_CUDA=ON failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target bitparity_nccl_check
                RESULT_VARIABLE build_result)
if(NOT build_result EQUAL 0)
  message(FATAL_ERROR "cuda build check: building bitparity_nccl_check failed")
endif()
execute_process(COMMAND ${BINARY_DIR}/bitparity_nccl_check RESULT_VARIABLE check_result)
if(check_result EQUAL 3)
  message("cuda build check: compiled; no usable GPU here, the exchange itself was not run")
elseif(NOT check_result EQUAL 0)
  message(FATAL_ERROR "cuda build check: bitparity_nccl_check exited ${check_result}")
endif()
