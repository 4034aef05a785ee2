package fsguard

// A Ledger is the record of a workspace's directories that one process
// leaves for the next: for every directory, its identity, its change time
// (ctime) and its entries' names. A pass (Ledger.Scan) looks again only at
// the directories whose change time is no longer the recorded one and
// reads the rest from the record, so a cold `vak run` in a large workspace
// costs one stat per directory instead of a walk of every entry. The
// answer is the one Tree.Scan gives with a walk at the same moment; see
// ledger_linux.go for why the change time is enough and what makes a
// Ledger walk after all.
//
// A Ledger is kept where no sandbox can write (vak's state directory): it
// is trusted the way the walk it replaces is, and is checked on every pass
// against the file system, never believed on its own.

// LedgerStats says what a Ledger's last pass did, for the trace and the
// tests.
type LedgerStats struct {
	// Loaded says the Ledger came from its file (Why says why not).
	Loaded bool
	Why    string
	// Dirs is how many directories the last pass found; Read is how many
	// of them it read (the rest it took from the record after a stat).
	Dirs, Read int
	// Off says why the Ledger gave up and every pass walks, or "".
	Off string
}
