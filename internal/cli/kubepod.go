package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"vak/internal/kubesession"
	"vak/internal/netfence"
	"vak/internal/wsync"
)

// The hidden commands a kubernetes session pod's init containers run
// (internal/kubesession builds the pod).

// newPodFenceCmd is `vak __pod-fence MODE`: the network fence of a session
// pod (netfence.FencePod), its receipt written to the termination log.
func newPodFenceCmd() *cobra.Command {
	var receipt string
	cmd := &cobra.Command{
		Use:    kubesession.FenceCommand + " MODE",
		Short:  "Install and self-test a session pod's network fence (run by a session pod's init container)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(netfence.PodModes, args[0]) {
				return exit(ExitUsage, fmt.Errorf("mode %q: want one of %s", args[0], strings.Join(netfence.PodModes, ", ")))
			}
			rc, err := netfence.FencePod(cmd.Context(), netfence.PodConfig{Mode: args[0]})
			if rc != nil {
				data, _ := json.Marshal(rc)
				if len(data) > 4000 {
					data = data[:4000]
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(data))
				if receipt != "" {
					if werr := os.WriteFile(receipt, data, 0o644); werr != nil && !os.IsNotExist(werr) && err == nil {
						err = werr
					}
				}
			}
			if err != nil {
				return exit(ExitUnavailable, fmt.Errorf("pod fence: %w", err))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&receipt, "receipt", "/dev/termination-log", "write the receipt (JSON) here too")
	return cmd
}

// newUntarCmd is `vak __untar DIR`: a tar stream on stdin unpacked into
// DIR (wsync.Unpack: nothing outside DIR, refused entries fail it).
func newUntarCmd() *cobra.Command {
	return &cobra.Command{
		Use:    kubesession.UntarCommand + " DIR",
		Short:  "Unpack a tar stream from stdin into DIR, checked (run by a session pod's init container)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := wsync.Unpack(cmd.InOrStdin(), args[0], wsync.UnpackOptions{})
			if err != nil {
				return exit(ExitUnavailable, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "vak: unpacked %d files, %d directories, %d symlinks, %d bytes into %s\n", st.Files, st.Dirs, st.Symlinks, st.Bytes, args[0])
			return nil
		},
	}
}

// newTarCmd is `vak __tar DIR`: DIR packed to stdout (wsync.Pack).
func newTarCmd() *cobra.Command {
	return &cobra.Command{
		Use:    kubesession.TarCommand + " DIR",
		Short:  "Pack DIR as a tar stream to stdout (run by vak in a session pod)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := wsync.Pack(cmd.OutOrStdout(), args[0], wsync.PackOptions{}); err != nil {
				return exit(ExitUnavailable, err)
			}
			return nil
		},
	}
}
