include(GoogleTest)

# hpct_add_unit_test(NAME SOURCES... [LIBS ...] [LABELS label])  (label: default unit)
function(hpct_add_unit_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  # One label per test: gtest_discover_tests splices a list-valued property into its key/value pairs.
  set(_label unit)
  if(T_LABELS)
    list(GET T_LABELS 0 _label)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS ${_label} ENVIRONMENT "OMP_NUM_THREADS=2"
                       DISCOVERY_TIMEOUT 60)
endfunction()

# add_mpi_test(NAME name COMMAND exe args... NP 1 2 4 [LABELS ...] [TIMEOUT s])
# registers name_np<N> running `mpiexec -np N --oversubscribe exe args...` with OMP_NUM_THREADS=1, RUN_SERIAL.
function(add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;NP;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(np IN LISTS T_NP)
    add_test(NAME ${T_NAME}_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --bind-to none
                     ${T_COMMAND})
    set_tests_properties(${T_NAME}_np${np} PROPERTIES
      RUN_SERIAL TRUE TIMEOUT ${T_TIMEOUT} LABELS "mpi;${T_LABELS}"
      ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
