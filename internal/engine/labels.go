package engine

// Labels every Docker object vak creates carries (containers, networks,
// volumes): gc, `vak session ls` and doctor find vak's objects by them.
// internal/archtest checks that no other package spells them.
const (
	LabelManaged   = "vak.managed"   // "true" on every object vak creates
	LabelKind      = "vak.kind"      // what the object is: "run" for command-scoped containers, "session", ...
	LabelRunID     = "vak.run"       // the sandbox.Command ID of a command-scoped container
	LabelWorkspace = "vak.workspace" // the canonical workspace path
	LabelOwner     = "vak.owner"     // host uid of the user who created it
	LabelOwnerProc = "vak.owner.pid" // OwnerToken of the owning process, if any ("BOOTID/PID/START")
)
