package dockerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// EnsureImage finds or builds the sidecar image for r and returns its tag.
// Building needs root and debootstrap (a Debian root from the archive apt
// is configured with, then apt-get install in a chroot, then an import;
// minutes): progress lines go to progress (may be nil).
func EnsureImage(ctx context.Context, cli *client.Client, r Recipe, progress io.Writer) (string, error) {
	tag := r.Tag()
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("dockerd: inspect %s: %w", tag, err)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("dockerd: the sidecar image %s is not built and building it needs root (debootstrap, chroot); build it once as root (see docs/nested-docker.md)", tag)
	}
	// One build per machine at a time (parallel test packages, several
	// sessions): wait for another builder, then look again.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "vak-dockerd-build-"+strings.TrimPrefix(tag, ImageRepo+":")+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", fmt.Errorf("dockerd: build lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("dockerd: build lock: %w", err)
	}
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("dockerd: building %s needs debootstrap (apt-get install -y debootstrap): %w", tag, err)
	}
	mirror, err := debianMirror()
	if err != nil {
		return "", err
	}
	say := func(f string, a ...any) {
		if progress != nil {
			fmt.Fprintf(progress, "vak: "+f+"\n", a...)
		}
	}
	dir, err := os.MkdirTemp("", "vak-dockerd-root-")
	if err != nil {
		return "", err
	}
	root := filepath.Join(dir, "root")
	procMounted := false
	defer func() {
		if procMounted {
			exec.Command("umount", "-l", filepath.Join(root, "proc")).Run()
		}
		os.RemoveAll(dir)
	}()
	run := func(step string, env []string, name string, args ...string) error {
		say("building %s: %s", tag, step)
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("dockerd: %s: %w", step, err)
		}
		sc := bufio.NewScanner(out)
		var tail []string
		for sc.Scan() {
			line := sc.Text()
			tail = append(tail, line)
			if len(tail) > 20 {
				tail = tail[1:]
			}
			// One line in a few: the step is long, the log longer.
			if (strings.HasPrefix(line, "I: ") && strings.HasSuffix(line, "...")) || strings.HasPrefix(line, "Setting up docker") || strings.HasPrefix(line, "Fetched ") {
				say("  %s", line)
			}
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("dockerd: %s: %w\n%s", step, err, strings.Join(tail, "\n"))
		}
		return nil
	}
	if err := run("debootstrap --variant=minbase "+r.Suite+" ("+mirror+")", nil, "debootstrap", "--variant=minbase", r.Suite, root, mirror); err != nil {
		return "", err
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return "", err
	}
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", fmt.Errorf("dockerd: read /etc/resolv.conf for the build chroot: %w", err)
	}
	resolvIn := filepath.Join(root, "etc/resolv.conf")
	os.Remove(resolvIn)
	if err := os.WriteFile(resolvIn, resolv, 0o644); err != nil {
		return "", err
	}
	if err := exec.Command("mount", "-t", "proc", "proc", filepath.Join(root, "proc")).Run(); err != nil {
		return "", fmt.Errorf("dockerd: mount proc in the build chroot: %w", err)
	}
	procMounted = true
	if err := run("apt-get update", nil, "chroot", root, "apt-get", "update"); err != nil {
		return "", err
	}
	install := append([]string{root, "apt-get", "install", "-y", "--no-install-recommends"}, r.Packages...)
	if err := run("apt-get install "+strings.Join(r.Packages, " "), []string{"DEBIAN_FRONTEND=noninteractive"}, "chroot", install...); err != nil {
		return "", err
	}
	if err := exec.Command("umount", filepath.Join(root, "proc")).Run(); err != nil {
		return "", fmt.Errorf("dockerd: unmount proc in the build chroot: %w", err)
	}
	procMounted = false
	os.Remove(policy)
	if err := os.WriteFile(resolvIn, nil, 0o644); err != nil {
		return "", err
	}
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		entries, _ := os.ReadDir(filepath.Join(root, d))
		for _, e := range entries {
			if !e.IsDir() {
				os.Remove(filepath.Join(root, d, e.Name()))
			}
		}
	}
	say("building %s: importing the root", tag)
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", root, "-c", ".")
	stream, err := tarCmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	var tarErr strings.Builder
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Start(); err != nil {
		return "", fmt.Errorf("dockerd: tar the root: %w", err)
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: stream, SourceName: "-"}, tag, client.ImageImportOptions{
		Changes: []string{
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			`CMD ["/bin/sh"]`,
			"LABEL " + LabelImageRecipe + "=" + strings.TrimPrefix(tag, ImageRepo+":"),
		},
	})
	if err != nil {
		tarCmd.Process.Kill()
		tarCmd.Wait()
		return "", fmt.Errorf("dockerd: import %s: %w", tag, err)
	}
	_, copyErr := io.Copy(io.Discard, res)
	res.Close()
	if err := tarCmd.Wait(); err != nil {
		return "", fmt.Errorf("dockerd: tar the root: %w: %s", err, tarErr.String())
	}
	if copyErr != nil {
		return "", fmt.Errorf("dockerd: import %s: %w", tag, copyErr)
	}
	if _, err := cli.ImageInspect(ctx, tag); err != nil {
		return "", fmt.Errorf("dockerd: import of %s finished but the image is missing: %w", tag, err)
	}
	say("built %s", tag)
	return tag, nil
}

// debianMirror is the archive apt is configured with (deb822 sources
// first, then sources.list), without the security archive.
func debianMirror() (string, error) {
	if m := os.Getenv("DEBIAN_MIRROR"); m != "" {
		return m, nil
	}
	var files []string
	d822, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, d822...)
	files = append(files, "/etc/apt/sources.list")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			var uri string
			switch {
			case len(fields) >= 2 && fields[0] == "URIs:":
				uri = fields[1]
			case len(fields) >= 3 && fields[0] == "deb" && !strings.HasPrefix(fields[1], "["):
				uri = fields[1]
			}
			if uri != "" && !strings.Contains(uri, "-security") {
				return uri, nil
			}
		}
	}
	return "", errors.New("dockerd: no Debian archive configured for apt (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list); set DEBIAN_MIRROR")
}
