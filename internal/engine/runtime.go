package engine

// DefaultRuntime is the OCI runtime every container vak creates names
// when no other is configured (sandbox.runtime unset): the Engine's
// built-in runc, never the Engine's own default. A daemon.json
// "default-runtime" (gVisor's runsc, say) would otherwise put vak's
// containers under a runtime their checks did not judge: the mount checks
// compare inode numbers that runtime makes up, the netclient's fence is
// nftables rules its network stack does not take, a session's socket is
// one it hides. A user who wants that runtime names it in sandbox.runtime,
// where vak checks what it can host; `vak doctor` says when the Engine's
// default is another.
const DefaultRuntime = "runc"
