/* JNI helper of LogTest (built only for the tests): runs dlrm_run_role on a thread the JVM
 * does not know, so the log lines that role writes come from a non-Java thread and the
 * binding's log trampoline (dlrm.i, jdlrm_log) must attach it to the JVM.
 *
 * Contract: Java_ai_dlrm_LogTest_runRoleOnNativeThread copies its arguments, starts one
 * pthread, joins it and returns null on success or the library's error (ASCII, other bytes
 * as '?'); the calling Java thread blocks meanwhile. It must be loaded after libdlrm (by
 * ai.dlrm.NativeLoader), so that its DT_NEEDED libdlrm is that same loaded copy. */
#include <jni.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "dlrm/dlrm.h"

typedef struct {
  char* config;
  char* cluster;
  dlrm_status status;
  char error[512];
} role_call;

static void* run_role(void* p) {
  role_call* call = (role_call*)p;
  size_t i;
  call->status = dlrm_run_role(call->config, call->cluster, NULL);
  if (call->status != DLRM_OK) {
    snprintf(call->error, sizeof call->error, "%s", dlrm_last_error());
    for (i = 0; call->error[i] != '\0'; ++i)
      if ((unsigned char)call->error[i] >= 0x80) call->error[i] = '?';
  }
  return NULL;
}

/* A NUL-terminated copy of a byte[] (free it), or NULL with an exception pending. */
static char* copy_bytes(JNIEnv* env, jbyteArray bytes) {
  jsize n = (*env)->GetArrayLength(env, bytes);
  char* text = (char*)malloc((size_t)n + 1);
  if (text == NULL) {
    jclass oom = (*env)->FindClass(env, "java/lang/OutOfMemoryError");
    if (oom != NULL) (*env)->ThrowNew(env, oom, "native_thread.c");
    return NULL;
  }
  (*env)->GetByteArrayRegion(env, bytes, 0, n, (jbyte*)text);
  text[n] = '\0';
  return text;
}

JNIEXPORT jstring JNICALL Java_ai_dlrm_LogTest_runRoleOnNativeThread(JNIEnv* env, jclass cls,
                                                                     jbyteArray config,
                                                                     jbyteArray cluster) {
  role_call call = {NULL, NULL, DLRM_INTERNAL, "pthread_create failed"};
  pthread_t thread;
  jstring result = NULL;
  (void)cls;
  call.config = copy_bytes(env, config);
  if (call.config != NULL) call.cluster = copy_bytes(env, cluster);
  if (call.cluster != NULL) {
    if (pthread_create(&thread, NULL, run_role, &call) == 0) pthread_join(thread, NULL);
    if (call.status != DLRM_OK) result = (*env)->NewStringUTF(env, call.error);
  }
  free(call.config);
  free(call.cluster);
  return result;
}
