# One static library per layer of engine/, linking only the layers below it.
#
# A layer's headers are reachable only through its include root,
# <build>/layers/<name>/engine/<name> (a symbolic link to engine/<name>), plus the root of its
# generated protobuf headers, <build>/proto/<name>. A target sees exactly the roots of the
# layers it links, so `#include "engine/<upper>/x.h"` from a lower layer fails to compile
# ("No such file or directory"): the build, not a review, rejects an upward include. The
# source tree itself is on no library's include path.
#
#   dlrm_layer(<name> [DEPS layer...] [SOURCES file...] [HEADERS file...]
#              [PUBLIC_LIBS lib...] [PRIVATE_LIBS lib...])
# SOURCES / HEADERS, relative to engine/: files of a layer that is not a folder (the top
# layer, engine.{h,cc}); a folder layer globs its *.cc, *.cu and *.proto.

function(dlrm_layer name)
  cmake_parse_arguments(L "" "" "DEPS;SOURCES;HEADERS;PUBLIC_LIBS;PRIVATE_LIBS" ${ARGN})
  set(engine_dir ${PROJECT_SOURCE_DIR}/engine)
  set(include_root ${PROJECT_BINARY_DIR}/layers/${name})
  set(proto_root ${PROJECT_BINARY_DIR}/proto/${name})
  file(MAKE_DIRECTORY ${include_root}/engine ${proto_root})
  if(L_SOURCES OR L_HEADERS)
    set(srcs "")
    foreach(f ${L_SOURCES})
      list(APPEND srcs ${engine_dir}/${f})
    endforeach()
    foreach(f ${L_HEADERS})
      dlrm_link(${engine_dir}/${f} ${include_root}/engine/${f})
    endforeach()
    set(protos "")
  else()
    file(GLOB srcs CONFIGURE_DEPENDS ${engine_dir}/${name}/*.cc ${engine_dir}/${name}/*.cu)
    file(GLOB protos CONFIGURE_DEPENDS ${engine_dir}/${name}/*.proto)
    dlrm_link(${engine_dir}/${name} ${include_root}/engine/${name})
  endif()
  dlrm_protoc("${protos}" ${proto_root} proto_srcs)
  add_library(dlrm_${name} STATIC ${srcs} ${proto_srcs})
  target_include_directories(dlrm_${name} PUBLIC ${include_root} ${proto_root})
  foreach(dep ${L_DEPS})
    target_link_libraries(dlrm_${name} PUBLIC dlrm_${dep})
  endforeach()
  target_link_libraries(dlrm_${name} PUBLIC ${L_PUBLIC_LIBS} PRIVATE ${L_PRIVATE_LIBS})
endfunction()

# A symbolic link at `link` to `target` (kept if it is already there).
function(dlrm_link target link)
  if(NOT IS_SYMLINK ${link})
    file(CREATE_LINK ${target} ${link} SYMBOLIC)
  endif()
endfunction()

# protoc for each of `protos` into out_root (as out_root/engine/<layer>/x.pb.{h,cc});
# imports resolve against the source tree. The generated sources go to ${out_var}.
function(dlrm_protoc protos out_root out_var)
  set(generated "")
  foreach(proto ${protos})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${proto})
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    add_custom_command(
      OUTPUT ${out_root}/${stem}.pb.cc ${out_root}/${stem}.pb.h
      COMMAND protobuf::protoc --cpp_out=${out_root} -I ${PROJECT_SOURCE_DIR} ${proto}
      DEPENDS ${proto} protobuf::protoc
      COMMENT "protoc ${rel}")
    list(APPEND generated ${out_root}/${stem}.pb.cc)
  endforeach()
  # Generated protobuf code trips -Wextra in some protobuf versions; not ours to fix.
  if(generated)
    set_source_files_properties(${generated} PROPERTIES COMPILE_OPTIONS "-Wno-unused-parameter")
  endif()
  set(${out_var} ${generated} PARENT_SCOPE)
endfunction()
