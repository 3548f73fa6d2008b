# The Java binding's tests, example and their native helpers (included by CMakeLists.txt
# when DLRM_BUILD_TESTS is on): JUnit suites under -Xcheck:jni, the jar loading its own
# native libraries, the ABI-mismatch refusal, and the PartitionTrainer example.
find_file(DLRM_JUNIT4_JAR NAMES junit4.jar junit.jar PATHS /usr/share/java)
find_file(DLRM_HAMCREST_JAR NAMES hamcrest-core.jar hamcrest.jar PATHS /usr/share/java)
if(NOT DLRM_JUNIT4_JAR OR NOT DLRM_HAMCREST_JAR)
  message(FATAL_ERROR "Java binding: JUnit 4 (junit4.jar, hamcrest-core.jar) not found; "
    "install the Debian package junit4")
endif()

file(GLOB_RECURSE DLRM_JAVA_TEST_SRCS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/src/test/java/*.java)
set(DLRM_JAVA_TEST_CP "${DLRM_JUNIT4_JAR}:${DLRM_HAMCREST_JAR}")
add_custom_command(
  OUTPUT ${DLRM_JAVA_OUT}/test-classes.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${DLRM_JAVA_OUT}/test-classes
  COMMAND ${Java_JAVAC_EXECUTABLE} ${DLRM_JAVAC_FLAGS}
    -cp ${DLRM_JAVA_TEST_CP}:${DLRM_JAVA_OUT}/classes
    -d ${DLRM_JAVA_OUT}/test-classes ${DLRM_JAVA_TEST_SRCS}
  COMMAND ${CMAKE_COMMAND} -E touch ${DLRM_JAVA_OUT}/test-classes.stamp
  DEPENDS ${DLRM_JAVA_TEST_SRCS} ${DLRM_JAVA_OUT}/classes.stamp
  COMMENT "javac: JUnit tests of ai.dlrm"
  VERBATIM)

file(GLOB_RECURSE DLRM_JAVA_EXAMPLE_SRCS CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/examples/*.java)
add_custom_command(
  OUTPUT ${DLRM_JAVA_OUT}/example-classes.stamp
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${DLRM_JAVA_OUT}/example-classes
  COMMAND ${Java_JAVAC_EXECUTABLE} ${DLRM_JAVAC_FLAGS} -cp ${DLRM_JAVA_OUT}/classes
    -d ${DLRM_JAVA_OUT}/example-classes ${DLRM_JAVA_EXAMPLE_SRCS}
  COMMAND ${CMAKE_COMMAND} -E touch ${DLRM_JAVA_OUT}/example-classes.stamp
  DEPENDS ${DLRM_JAVA_EXAMPLE_SRCS} ${DLRM_JAVA_OUT}/classes.stamp
  COMMENT "javac: examples"
  VERBATIM)

# A stub libdlrm of another ABI version, next to a copy of libdlrm_jni (AbiMismatchTest).
set(DLRM_JAVA_ABI_STUB_DIR ${DLRM_JAVA_OUT}/abi-stub)
add_library(dlrm_java_abi_stub SHARED src/test/native/abi_stub.c)
target_include_directories(dlrm_java_abi_stub PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_options(dlrm_java_abi_stub PRIVATE
  -Wl,-soname,${CMAKE_SHARED_LIBRARY_PREFIX}dlrm${CMAKE_SHARED_LIBRARY_SUFFIX}.${_dlrm_soversion})
set_target_properties(dlrm_java_abi_stub PROPERTIES NO_SONAME ON
  LIBRARY_OUTPUT_DIRECTORY ${DLRM_JAVA_OUT}/abi-stub-build)
add_custom_command(
  OUTPUT ${DLRM_JAVA_ABI_STUB_DIR}/stamp
  COMMAND ${CMAKE_COMMAND} -E make_directory ${DLRM_JAVA_ABI_STUB_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy $<TARGET_FILE:dlrm_java_abi_stub>
    ${DLRM_JAVA_ABI_STUB_DIR}/${CMAKE_SHARED_LIBRARY_PREFIX}dlrm${CMAKE_SHARED_LIBRARY_SUFFIX}.${_dlrm_soversion}
  COMMAND ${CMAKE_COMMAND} -E copy $<TARGET_FILE:dlrm_jni> ${DLRM_JAVA_ABI_STUB_DIR}/
  COMMAND ${CMAKE_COMMAND} -E touch ${DLRM_JAVA_ABI_STUB_DIR}/stamp
  DEPENDS dlrm_java_abi_stub dlrm_jni
  VERBATIM)

# A JNI library of the tests: runs a role on a thread the JVM does not know (LogTest), and
# builds Arrow arrays to the C Data Interface spec (ArrowBatchTest; Arrow Java is not needed).
find_package(Threads REQUIRED)
add_library(dlrm_java_test_native SHARED
  src/test/native/native_thread.c src/test/native/arrow_arrays.c)
target_include_directories(dlrm_java_test_native PRIVATE
  ${JAVA_INCLUDE_PATH} ${JAVA_INCLUDE_PATH2} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(dlrm_java_test_native PRIVATE dlrm Threads::Threads)
target_link_options(dlrm_java_test_native PRIVATE -Wl,--no-undefined)
set_target_properties(dlrm_java_test_native PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${DLRM_JAVA_OUT}/test-native)

add_custom_target(dlrm_java_tests ALL
  DEPENDS ${DLRM_JAVA_OUT}/test-classes.stamp ${DLRM_JAVA_OUT}/example-classes.stamp
    ${DLRM_JAVA_ABI_STUB_DIR}/stamp)
add_dependencies(dlrm_java_tests dlrm_java dlrm_java_test_native)

# ---- ctest ---------------------------------------------------------------------------------
# Every src/test/java/**/*Test.java is a JUnit class of java_tests.
set(DLRM_JAVA_TEST_CLASSES "")
foreach(src ${DLRM_JAVA_TEST_SRCS})
  if(src MATCHES "/src/test/java/(.*Test)\\.java$")
    string(REPLACE "/" "." cls "${CMAKE_MATCH_1}")
    list(APPEND DLRM_JAVA_TEST_CLASSES ${cls})
  endif()
endforeach()

set(DLRM_JAVA_RUN_CP "${DLRM_JAVA_TEST_CP}:${DLRM_JAVA_JAR}:${DLRM_JAVA_OUT}/test-classes")
# -Xcheck:jni makes the JVM verify every JNI call of the wrapper (pending exceptions, array
# release modes, types); its complaints fail the test.
set(DLRM_JAVA_JVM_FLAGS -Xcheck:jni -Djava.io.tmpdir=${DLRM_JAVA_OUT}/tmp)
set(DLRM_JAVA_JNI_COMPLAINTS "WARNING in native method|FATAL ERROR in native method|WARNING: JNI")

# Under DLRM_SANITIZE the JNI glue and libdlrm are instrumented: the JVM (not instrumented)
# needs the sanitizer runtimes preloaded, leak checking off (the JVM never frees some memory)
# and its own SIGSEGV handling left alone (it uses the signal for null checks).
set(DLRM_JAVA_TEST_ENV "DLRM_TEST_MODEL=${PROJECT_SOURCE_DIR}/tests/data/small_model.pbtxt")
set(DLRM_JAVA_SKIP_TESTS OFF)
if(DLRM_SANITIZE)
  set(_dlrm_preload "")
  foreach(rt libasan.so libubsan.so)
    execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=${rt}
      OUTPUT_VARIABLE _dlrm_rt OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(IS_ABSOLUTE "${_dlrm_rt}" AND EXISTS "${_dlrm_rt}")
      list(APPEND _dlrm_preload "${_dlrm_rt}")
    endif()
  endforeach()
  list(LENGTH _dlrm_preload _dlrm_n)
  if(_dlrm_n EQUAL 2)
    string(REPLACE ";" ":" _dlrm_preload "${_dlrm_preload}")
    list(APPEND DLRM_JAVA_TEST_ENV "LD_PRELOAD=${_dlrm_preload}"
      "ASAN_OPTIONS=detect_leaks=0:handle_segv=0:allow_user_segv_handler=1:use_sigaltstack=0"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  else()
    message(STATUS "Java binding: sanitizer runtimes not found via ${CMAKE_C_COMPILER}; "
      "Java tests not registered under DLRM_SANITIZE")
    set(DLRM_JAVA_SKIP_TESTS ON)
  endif()
endif()

if(NOT DLRM_JAVA_SKIP_TESTS)
  set(_dlrm_java_tests_env "DLRM_CROSSLANG_DIR=${DLRM_CROSSLANG_DIR}" ${DLRM_JAVA_TEST_ENV})
  add_test(NAME java_tests
    COMMAND ${Java_JAVA_EXECUTABLE} ${DLRM_JAVA_JVM_FLAGS}
      -Djava.library.path=${DLRM_JAVA_NATIVE} -Ddlrm.test.expectSource=LIBRARY_PATH
      -Ddlrm.test.nativeLib=$<TARGET_FILE:dlrm_java_test_native>
      -Ddlrm.test.sourceDir=${PROJECT_SOURCE_DIR}
      -cp ${DLRM_JAVA_RUN_CP} org.junit.runner.JUnitCore ${DLRM_JAVA_TEST_CLASSES})
  set_tests_properties(java_tests PROPERTIES
    ENVIRONMENT "${_dlrm_java_tests_env}"
    FIXTURES_REQUIRED crosslang
    FAIL_REGULAR_EXPRESSION "${DLRM_JAVA_JNI_COMPLAINTS}"
    TIMEOUT 120
    LABELS "java;bindings")

  # No java.library.path: the libraries must come out of the jar.
  add_test(NAME java_jar_loading
    COMMAND ${Java_JAVA_EXECUTABLE} ${DLRM_JAVA_JVM_FLAGS} -Ddlrm.test.expectSource=JAR
      -cp ${DLRM_JAVA_RUN_CP} org.junit.runner.JUnitCore ai.dlrm.JarLoadingTest)
  set_tests_properties(java_jar_loading PROPERTIES
    ENVIRONMENT "${DLRM_JAVA_TEST_ENV}"
    FAIL_REGULAR_EXPRESSION "${DLRM_JAVA_JNI_COMPLAINTS}"
    TIMEOUT 60
    LABELS "java;bindings")

  # The jar's native directory is self-contained: every library there loads its
  # dependencies from there or the base system (ldd, empty environment).
  add_test(NAME java_native_bundle
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/bundle_runtime.py check
      ${DLRM_JAVA_NATIVE})
  set_tests_properties(java_native_bundle PROPERTIES TIMEOUT 60 LABELS "java;bindings")

  # A libdlrm of another ABI version must be refused at load, naming both versions.
  add_test(NAME java_abi_mismatch
    COMMAND ${Java_JAVA_EXECUTABLE} ${DLRM_JAVA_JVM_FLAGS}
      -Djava.library.path=${DLRM_JAVA_ABI_STUB_DIR} -Ddlrm.test.expectAbiMismatch=true
      -cp ${DLRM_JAVA_RUN_CP} org.junit.runner.JUnitCore ai.dlrm.AbiMismatchTest)
  set_tests_properties(java_abi_mismatch PROPERTIES
    ENVIRONMENT "${DLRM_JAVA_TEST_ENV}"
    FAIL_REGULAR_EXPRESSION "${DLRM_JAVA_JNI_COMPLAINTS}"
    TIMEOUT 60
    LABELS "java;bindings")

  add_test(NAME java_example
    COMMAND ${Java_JAVA_EXECUTABLE} ${DLRM_JAVA_JVM_FLAGS}
      -Djava.library.path=${DLRM_JAVA_NATIVE}
      -cp ${DLRM_JAVA_JAR}:${DLRM_JAVA_OUT}/example-classes
      ai.dlrm.examples.PartitionTrainer)
  set_tests_properties(java_example PROPERTIES
    ENVIRONMENT "${DLRM_JAVA_TEST_ENV}"
    FAIL_REGULAR_EXPRESSION "${DLRM_JAVA_JNI_COMPLAINTS}"
    TIMEOUT 120
    LABELS "java;bindings")
endif()
