package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

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
	return cmd
}
