package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"vak/internal/interact"
	"vak/internal/kubesession"
	"vak/internal/launch"
)

// newSessionWorkerImageCmd is `vak session worker-image`.
func (a *app) newSessionWorkerImageCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "worker-image [-o FILE]",
		Short: "Write the worker image kubernetes sessions start from (a docker-archive tar)",
		Long: `Write the image that kubernetes session pods' init containers run: this vak
binary alone at /vak, as a 'docker save' archive. Its reference
(vak.local/worker:<digest of this binary>) is printed on stderr; it is what
'vak session create --backend kubernetes' asks the cluster for unless
kubernetes.worker_image names another.

Load it onto the cluster's nodes (no registry needed):
  vak session worker-image -o worker.tar && ctr -n k8s.io images import worker.tar
or push it to a registry the cluster pulls from and set kubernetes.worker_image:
  skopeo copy docker-archive:worker.tar docker://registry.example/vak-worker:TAG

vak must be a static Linux build (CGO_ENABLED=0), as for Docker sessions.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (out == "" || out == "-") && interact.IsTerminal(a.stdio.Out) {
				return exit(ExitUsage, errors.New("refusing to write an image archive to a terminal: use -o FILE or a pipe"))
			}
			exe, err := os.Executable()
			if err != nil {
				return exit(ExitInternal, err)
			}
			ref, err := kubesession.WriteWorkerImageFile(out, a.stdio.Out, exe)
			if err != nil {
				return exitFor(err)
			}
			fmt.Fprintln(a.stdio.Err, ref)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE (default: stdout, which must not be a terminal)")
	return cmd
}

// newSessionPullCmd is `vak session pull ID`.
func (a *app) newSessionPullCmd(sf *sessionFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "pull ID",
		Short: "Bring a kubernetes session's workspace changes back to the host workspace, checked",
		Long: `Copy what a kubernetes session changed in its workspace back to the host
workspace. A kubernetes session works on a copy uploaded at create; nothing it
writes reaches this machine except through pull.

The session's workspace arrives as a tar stream and is unpacked into a private
staging directory first (a malformed stream changes nothing), then applied
file by file. Refused, and listed: protected paths (files.protected, as the
tripwire protects them), every git control entry (.git in any spelling, at any
depth), symbolic links that are absolute, leave the workspace or point at a
protected path, and files that would replace a directory. Files the session
deleted are not deleted here.

Exit status: 0 when everything was applied, 1 when some entries were refused
(the rest was applied), 2 for an unknown session, 69 when the session or the
cluster cannot be reached (nothing was applied).`,
		Example: `  vak session exec "$id" -- make fmt
  vak session pull "$id" && git diff`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, err := launch.KubeWorkspace(args[0])
			if err != nil {
				return exitFor(err)
			}
			ws, cfg, err := a.workspaceConfig(runFlags{workspace: ws})
			if err != nil {
				return err
			}
			req, err := a.sessionRequest(ws, cfg, sf)
			if err != nil {
				return err
			}
			rep, err := launch.PullSession(cmd.Context(), req, args[0])
			if err != nil {
				return exitFor(err)
			}
			for _, w := range rep.Written {
				fmt.Fprintf(a.stdio.Out, "updated %s\n", w)
			}
			for _, r := range rep.Refused {
				fmt.Fprintf(a.stdio.Err, "vak: refused %s: %s\n", r.Path, r.Reason)
			}
			fmt.Fprintf(a.stdio.Err, "vak: pulled %s into %s: %d updated, %d unchanged, %d refused\n", args[0], ws, len(rep.Written), rep.Unchanged, len(rep.Refused))
			if len(rep.Refused) > 0 {
				return exit(1, nil)
			}
			return nil
		},
	}
}
