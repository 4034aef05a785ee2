package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"vak/internal/kubesession"
	"vak/internal/netfence"
	"vak/internal/worker"
	"vak/internal/wsync"
)

// podCommands are the hidden commands vak runs in a kubernetes session's
// pod (internal/kubesession builds it): the relay to the worker, the init
// containers' fence, self-install and workspace upload, and the pack of a
// pull. Each takes one argument; a failure exits 69.
func podCommands() []*cobra.Command {
	var receipt, input, next string
	fence := hiddenCmd(kubesession.FenceCommand+" MODE", "Install and self-test a session pod's network fence (run by vak in a session pod)", func(cmd *cobra.Command, arg string) error {
		return netfence.PodFenceMain(cmd.Context(), arg, receipt, cmd.OutOrStdout())
	})
	fence.Flags().StringVar(&receipt, "receipt", "/dev/termination-log", "write the receipt (JSON) here too")
	untar := untarCmd(&input, &next)
	return []*cobra.Command{
		fence,
		hiddenCmd(worker.RelayCommand+" SOCKET", "Relay stdio to a session worker's socket (run by vak in a session pod)", func(_ *cobra.Command, arg string) error {
			return worker.Relay(arg, os.Stdin, os.Stdout)
		}),
		hiddenCmd(worker.InstallCommand+" DST", "Copy this vak to DST (run by vak in a session pod)", func(_ *cobra.Command, arg string) error {
			return worker.Install(arg)
		}),
		untar,
		hiddenCmd(kubesession.TarCommand+" DIR", "Pack DIR as a tar stream to stdout (run by vak in a session pod)", func(cmd *cobra.Command, arg string) error {
			_, err := wsync.Pack(cmd.OutOrStdout(), arg, wsync.PackOptions{})
			return err
		}),
	}
}

// untarCmd is `vak __untar DIR`: the sync init container's (stdin: the
// workspace, then with --next the home of a snapshot) and the gateway
// pod's (--input, its Secret's tar).
func untarCmd(input, next *string) *cobra.Command {
	cmd := hiddenCmd(kubesession.UntarCommand+" DIR", "Unpack a tar stream from stdin (or --input) into DIR, checked (run by vak in a session pod)", func(cmd *cobra.Command, arg string) error {
		in := cmd.InOrStdin()
		if *input != "" {
			f, err := os.Open(*input)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		for _, dir := range []string{arg, *next} {
			if dir == "" {
				break
			}
			// One archive after the other on one stream: a tar reader stops
			// right after its archive's end blocks.
			st, err := wsync.Unpack(in, dir, wsync.UnpackOptions{})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "vak: unpacked %d files, %d directories, %d symlinks, %d bytes into %s\n", st.Files, st.Dirs, st.Symlinks, st.Bytes, dir)
		}
		return nil
	})
	cmd.Flags().StringVar(input, "input", "", "read the tar from this file instead of stdin")
	cmd.Flags().StringVar(next, "next", "", "then unpack a second archive from the same input into this directory")
	return cmd
}

// hiddenCmd is a hidden command of one argument run by vak itself (in a
// session pod, or a workspace's keeper); a failure exits 69.
func hiddenCmd(use, short string, run func(cmd *cobra.Command, arg string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Hidden: true, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := run(cmd, args[0]); err != nil {
				return exit(ExitUnavailable, err)
			}
			return nil
		},
	}
}
