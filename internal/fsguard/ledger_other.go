//go:build !linux

package fsguard

// Ledger keeps a workspace's directories between processes (Linux only).
type Ledger struct{}

// OpenLedger returns a Ledger whose Scan is Tree.Scan.
func OpenLedger(ws, file string) *Ledger { return &Ledger{} }

// Scan is t.Scan(setuid).
func (l *Ledger) Scan(t *Tree, setuid bool) (Scan, error) { return t.Scan(setuid) }

// Save does nothing here.
func (l *Ledger) Save() error { return nil }

// Stats is empty here.
func (l *Ledger) Stats() LedgerStats { return LedgerStats{Why: errUnsupported.Error()} }
