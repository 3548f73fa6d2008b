module libdlrm.dev/dlrm

go 1.19
