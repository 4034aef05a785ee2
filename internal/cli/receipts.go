package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"vak/internal/egress/gateway"
	"vak/internal/launch"
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
			key, err := receiptsKey(keyPath)
			if err != nil {
				return exit(ExitFailure, err)
			}
			note := func(msg string) { fmt.Fprintf(a.stdio.Err, "vak: %s\n", msg) }
			return exitFor(receipts.VerifyReport(a.stdio.Out, args[0], key, allowUnsigned, note))
		},
	}
	verify.Flags().StringVar(&keyPath, "key", "", "the gateway's receipts public key (PEM; default: receipts-key/receipts.pub in vak's state directory)")
	verify.Flags().BoolVar(&allowUnsigned, "allow-unsigned", false, "accept a log without a signature file (written before receipts were signed)")
	cmd.AddCommand(verify, a.newReceiptsLsCmd(), a.newReceiptsFetchCmd())
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
			if !chainOnly && keyPath == "" {
				keyPath = filepath.Join(gateway.ReceiptsKeyDir(state), receipts.PubKeyFile)
			}
			return exitFor(receipts.ListReport(a.stdio.Out, dir, keyPath, chainOnly))
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the gateway's receipts public key (PEM; default: receipts-key/receipts.pub in vak's state directory)")
	cmd.Flags().BoolVar(&chainOnly, "chain-only", false, "check the hash chains and heads only, not the signatures")
	return cmd
}

func (a *app) newReceiptsFetchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "fetch",
		Short: "Copy the kubernetes gateway's receipts logs to this host and verify them",
		Long: `Copy the receipts logs of the in-cluster gateway of the configured cluster and
namespace ([kubernetes] in the user config, session.backend = "kubernetes")
to vak's state directory (kube-gateways/.../receipts/POD/), replacing an
earlier copy of each running gateway pod's, then list and verify them with
the gateway's public key, which this host kept when it deployed the gateway
(as 'vak receipts ls' does). A gateway pod keeps its logs on a volume that
goes with the pod: fetch before it is replaced. Exits 1 when a log does not
verify.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.loadConfig("")
			if err != nil {
				return err
			}
			dir, key, pods, err := launch.KubeReceipts(cmd.Context(), a.launchRequest("", cfg))
			if err != nil {
				return exitFor(err)
			}
			fmt.Fprintf(a.stdio.Err, "vak: copied the receipts of %s into %s\n", strings.Join(pods, ", "), dir)
			return exitFor(receipts.ListReport(a.stdio.Out, dir, key, false))
		},
	}
}

// receiptsKey is the receipts public key's path: keyPath, or by default
// the gateway's in vak's state directory.
func receiptsKey(keyPath string) (string, error) {
	if keyPath != "" {
		return keyPath, nil
	}
	state, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(gateway.ReceiptsKeyDir(state), receipts.PubKeyFile), nil
}
