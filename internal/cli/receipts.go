package cli

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/egress/gateway"
	"vak/internal/paths"
	"vak/internal/receipts"
)

func (a *app) newReceiptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Work with the gateway's hash-chained, signed receipts logs",
	}
	var keyPath string
	var allowUnsigned bool
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a receipts log for edits, deletions, reordering and unsigned records",
		Long: `Verify a receipts log: every record must parse, sequence numbers must be
consecutive from 0, and each record must carry the SHA-256 of the previous
one. Every record must be covered by a checkpoint in FILE.sig signed with the
gateway's Ed25519 key (--key, default: the receipts.pub in vak's state
directory), so records appended or edited without the key, and a missing or
cut signature file, fail. When FILE.head exists, the log must also reach the
record it names, which catches a truncated tail. --allow-unsigned accepts a
log without FILE.sig (written before receipts were signed) and then checks
the hash chain and head only. Exits 0 when the log verifies, 1 when it does
not.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if keyPath == "" {
				state, err := paths.StateDir()
				if err != nil {
					return exit(ExitFailure, err)
				}
				keyPath = filepath.Join(gateway.ReceiptsKeyDir(state), receipts.PubKeyFile)
			}
			var rep *receipts.Report
			var err error
			pub, kerr := receipts.LoadPublicKey(keyPath)
			switch {
			case kerr == nil:
				rep, err = receipts.VerifyFileSigned(path, pub, allowUnsigned)
			case allowUnsigned:
				fmt.Fprintf(a.stdio.Err, "vak: no public key (%v): checking the hash chain only\n", kerr)
				rep, err = receipts.VerifyFile(path)
			default:
				return exit(ExitFailure, fmt.Errorf("%w (pass --key with the gateway's %s, or --allow-unsigned to check the hash chain only)", kerr, receipts.PubKeyFile))
			}
			if rep != nil {
				for _, p := range rep.Problems {
					if p.Line == 0 {
						fmt.Fprintf(a.stdio.Out, "%s%s: %s\n", path, p.File, p.Reason)
					} else {
						fmt.Fprintf(a.stdio.Out, "%s%s:%d: %s\n", path, p.File, p.Line, p.Reason)
					}
				}
			}
			if err != nil {
				if errors.Is(err, receipts.ErrTampered) {
					return exit(ExitFailure, fmt.Errorf("%s does not verify", path))
				}
				return exit(ExitFailure, err)
			}
			head := "no head file"
			if rep.HeadChecked {
				head = "matches its head file"
			}
			signed := "signatures not checked"
			if rep.Signed {
				signed = fmt.Sprintf("every record signed, %d checkpoint(s), key %.16s", rep.Checkpoints, receipts.KeyID(pub))
			}
			fmt.Fprintf(a.stdio.Out, "%s: OK, %d record(s), last hash %s (%s; %s)\n", path, rep.Records, rep.Head.Hash, head, signed)
			return nil
		},
	}
	verify.Flags().StringVar(&keyPath, "key", "", "the gateway's receipts public key (PEM; default: receipts-key/receipts.pub in vak's state directory)")
	verify.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "accept a log without a signature file (written before receipts were signed)")
	cmd.AddCommand(verify, a.newReceiptsLsCmd())
	return cmd
}

func (a *app) newReceiptsLsCmd() *cobra.Command {
	var keyPath string
	var chainOnly bool
	cmd := &cobra.Command{
		Use:   "ls [DIR]",
		Short: "List the kept receipts logs and verify each",
		Long: `List every receipts log (*.jsonl) under DIR, by default vak's state
directory's receipts/ (where the proxied network keeps one log per gateway
lifetime, in proxynet-KEY/), with its record count, the time of its first
and last record and whether it verifies, signatures included (--key, default:
the receipts.pub in vak's state directory; --chain-only checks the hash
chain and head only). Exits 1 when a log does not verify.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			state, err := paths.StateDir()
			if err != nil {
				return exit(ExitFailure, err)
			}
			dir := filepath.Join(state, "receipts")
			if len(args) == 1 {
				dir = args[0]
			}
			var pub ed25519.PublicKey
			if !chainOnly {
				if keyPath == "" {
					keyPath = filepath.Join(gateway.ReceiptsKeyDir(state), receipts.PubKeyFile)
				}
				if pub, err = receipts.LoadPublicKey(keyPath); err != nil {
					return exit(ExitFailure, fmt.Errorf("%w (pass --key with the gateway's %s, or --chain-only)", err, receipts.PubKeyFile))
				}
			}
			list, err := receipts.List(dir, pub)
			if err != nil {
				return exit(ExitFailure, err)
			}
			tw := tabwriter.NewWriter(a.stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LOG\tRECORDS\tFIRST\tLAST\tVERIFIES")
			bad := 0
			stamp := func(t time.Time) string {
				if t.IsZero() {
					return "-"
				}
				return t.UTC().Format(time.RFC3339)
			}
			for _, s := range list {
				status := "OK"
				if pub == nil {
					status = "OK (chain only)"
				}
				if s.Problem != "" {
					status, bad = "NO: "+s.Problem, bad+1
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Path, s.Records, stamp(s.First), stamp(s.Last), status)
			}
			tw.Flush()
			if bad > 0 {
				return exit(ExitFailure, fmt.Errorf("%d of %d receipts log(s) do not verify (details: vak receipts verify FILE)", bad, len(list)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the gateway's receipts public key (PEM; default: receipts-key/receipts.pub in vak's state directory)")
	cmd.Flags().BoolVar(&chainOnly, "chain-only", false, "check the hash chains and heads only, not the signatures")
	return cmd
}
