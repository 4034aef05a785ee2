package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/paths"
	"vak/internal/receipts"
)

func (a *app) newReceiptsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Work with the gateway's hash-chained receipts logs",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify FILE",
		Short: "Check a receipts log for edits, deletions and reordering",
		Long: `Verify a receipts log: every record must parse, sequence numbers must be
consecutive from 0, and each record must carry the SHA-256 of the previous
one. When FILE.head exists (the gateway keeps it), the log must also end at
the record it names, which catches a truncated tail. Exits 0 when the log
verifies, 1 when it does not.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := receipts.VerifyFile(args[0])
			if rep != nil {
				for _, p := range rep.Problems {
					if p.Line == 0 {
						fmt.Fprintf(a.stdio.Out, "%s.head: %s\n", args[0], p.Reason)
					} else {
						fmt.Fprintf(a.stdio.Out, "%s:%d: %s\n", args[0], p.Line, p.Reason)
					}
				}
			}
			if err != nil {
				if errors.Is(err, receipts.ErrTampered) {
					return exit(ExitFailure, fmt.Errorf("%s does not verify", args[0]))
				}
				return exit(ExitFailure, err)
			}
			head := "no head file"
			if rep.HeadChecked {
				head = "matches its head file"
			}
			fmt.Fprintf(a.stdio.Out, "%s: OK, %d record(s), last hash %s (%s)\n", args[0], rep.Records, rep.Head.Hash, head)
			return nil
		},
	})
	cmd.AddCommand(a.newReceiptsLsCmd())
	return cmd
}

func (a *app) newReceiptsLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls [DIR]",
		Short: "List the kept receipts logs and verify each",
		Long: `List every receipts log (*.jsonl) under DIR, by default vak's state
directory's receipts/ (where the proxied network keeps one log per gateway
lifetime, in proxynet-KEY/), with its record count, the time of its first
and last record and whether it verifies. Exits 1 when a log does not verify.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ""
			if len(args) == 1 {
				dir = args[0]
			} else {
				state, err := paths.StateDir()
				if err != nil {
					return exit(ExitFailure, err)
				}
				dir = filepath.Join(state, "receipts")
			}
			list, err := receipts.List(dir)
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
}
