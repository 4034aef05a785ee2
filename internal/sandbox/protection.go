package sandbox

// Protection is the protected-path plan of a workspace: what a backend
// mounts so that protected paths stay read-only in WorkspaceWrite. The
// broker (or the session manager) makes it once, with
// fsguard.PlanProtection (or fsguard.ProtectionOf from the walk that
// records the tripwire's baseline), and hands it to the backend as data; a
// backend never walks the workspace for it again.
type Protection struct {
	// Configured are the workspace-relative protected paths
	// (DefaultProtected plus the configured ones), whether or not they
	// exist: what a backend that protects by name (seatbelt's profile)
	// and the tripwire check.
	Configured []string
	// ReadOnly are the absolute paths of the existing protected paths,
	// nested repositories included (fsguard.Plan.ReadOnly): mounted
	// read-only.
	ReadOnly []string
	// Pin are the absolute paths of existing directories bound onto
	// themselves read-write, so that `.git` and the parents of protected
	// paths cannot be renamed, removed or replaced (fsguard.Plan.Pin).
	Pin []string
}
