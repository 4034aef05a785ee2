package agentnet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"vak/internal/receipts"
)

// Layout of the broker's directory inside vak's state dir.

// Dir is the broker's directory inside vak's state dir.
func Dir(stateDir string) string { return filepath.Join(stateDir, "agentnet") }

// ReceiptsFile is the broker's receipts log.
func ReceiptsFile(dir string) string { return filepath.Join(dir, "receipts.jsonl") }

// ReceiptsKeyDir holds the Ed25519 key that signs the receipts (and its
// public half, receipts.PubKeyFile, for `vak receipts verify --key`).
func ReceiptsKeyDir(dir string) string { return filepath.Join(dir, "receipts-key") }

// PIDFile holds the running broker's process id (written once it
// listens, removed when it stops).
func PIDFile(dir string) string { return filepath.Join(dir, "broker.pid") }

// LogFile receives the output of a broker started on demand (Ensure).
func LogFile(dir string) string { return filepath.Join(dir, "broker.log") }

// RunOptions configure Run.
type RunOptions struct {
	// Dir is the broker directory (Dir(stateDir)).
	Dir string
	// UID is the user served.
	UID int
	// Policies loads the policies from the trusted user config; it is
	// called at start and on every reload.
	Policies func() ([]Policy, error)
	// Ready, if set, is called once the socket listens.
	Ready func(socket string)
	// PolicyFile names the file Policies reads, in refused registrations
	// (Options.PolicyFile).
	PolicyFile string
}

// Run is `vak agentnet serve`: it opens the signed receipts log, loads the
// policies, listens on the socket and serves until ctx ends.
func Run(ctx context.Context, o RunOptions) error {
	l, err := Listen(o.Dir)
	if err != nil {
		return err
	}
	defer l.Close()
	key, err := receipts.LoadOrCreateKey(ReceiptsKeyDir(o.Dir))
	if err != nil {
		return fmt.Errorf("agentnet: receipts key: %w", err)
	}
	log, err := receipts.OpenSigned(ReceiptsFile(o.Dir), key)
	if err != nil {
		return fmt.Errorf("agentnet: receipts: %w", err)
	}
	defer log.Close()
	b, err := New(Options{StateDir: o.Dir, Receipts: log, UID: o.UID, PolicyFile: o.PolicyFile})
	if err != nil {
		return err
	}
	reload := func() error {
		ps, err := o.Policies()
		if err != nil {
			return err
		}
		return b.SetPolicies(ps)
	}
	if err := reload(); err != nil {
		return err
	}
	if err := os.WriteFile(PIDFile(o.Dir), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return fmt.Errorf("agentnet: %w", err)
	}
	defer os.Remove(PIDFile(o.Dir))
	go func() {
		t := time.NewTicker(ExpireInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				b.Expire()
			}
		}
	}()
	if o.Ready != nil {
		o.Ready(l.Addr().String())
	}
	err = (&Server{Broker: b, UID: o.UID, Reload: reload}).Serve(ctx, l)
	if serr := log.Sync(); err == nil && serr != nil {
		err = fmt.Errorf("agentnet: receipts: %w", serr)
	}
	return err
}
