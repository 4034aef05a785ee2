package leanstage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// minFD is the lowest descriptor number the memfd gets: exec.Cmd's
// ExtraFiles become descriptors 3, 4, ... in the child before it executes
// /proc/self/fd/N, so N must not be among them.
const minFD = 100

// sealedExecutable copies prog (data of this process's executable) into a
// memfd, seals it against any change and returns /proc/self/fd/N of a
// read-only descriptor of it (an executable open for writing cannot be
// executed on older kernels). The descriptor is close-on-exec: the child
// that executes the path resolves it before its exec closes it.
func sealedExecutable(prog string) (string, error) {
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("vak-stage", flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		// Kernels before 6.3 know no MFD_EXEC; their memfds are executable.
		fd, err = unix.MemfdCreate("vak-stage", flags)
	}
	if err != nil {
		return "", fmt.Errorf("leanstage: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := fill(fd, prog); err != nil {
		return "", fmt.Errorf("leanstage: write memfd: %w", err)
	}
	seals := unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals|unix.F_SEAL_EXEC)
	if errors.Is(err, unix.EINVAL) {
		// Kernels before 6.3 know no F_SEAL_EXEC.
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals)
	}
	if err != nil {
		return "", fmt.Errorf("leanstage: seal memfd: %w", err)
	}
	ro, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("leanstage: reopen memfd read-only: %w", err)
	}
	high, err := unix.FcntlInt(uintptr(ro), unix.F_DUPFD_CLOEXEC, minFD)
	unix.Close(ro)
	if err != nil {
		return "", fmt.Errorf("leanstage: move memfd: %w", err)
	}
	// The descriptor stays open for the life of the process.
	return "/proc/self/fd/" + strconv.Itoa(high), nil
}

// fill writes prog to fd: from the executable's page cache where it can
// (sendFromExecutable), else from memory.
func fill(fd int, prog string) error {
	if sendFromExecutable(fd, prog) == nil {
		return nil
	}
	// Start again, from memory.
	if err := unix.Ftruncate(fd, 0); err != nil {
		return err
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return err
	}
	b := unsafe.Slice(unsafe.StringData(prog), len(prog))
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// sendFromExecutable copies prog, which lies in this process's executable
// mapped read-only, from the executable's page cache (sendfile): that
// spares this process a page fault for every page of it it has not
// touched.
func sendFromExecutable(fd int, prog string) error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer exe.Close()
	off, ok := fileOffset(exe, uintptr(unsafe.Pointer(unsafe.StringData(prog))), len(prog))
	if !ok {
		return errors.New("the program is not mapped from the executable")
	}
	return sendAll(fd, int(exe.Fd()), off, len(prog))
}

// sendAll copies n bytes at off of in to out.
func sendAll(out, in int, off int64, n int) error {
	for n > 0 {
		m, err := unix.Sendfile(out, in, &off, n)
		if err != nil {
			return err
		}
		if m == 0 {
			return errors.New("sendfile: unexpected end of the executable")
		}
		n -= m
	}
	return nil
}

// fileOffset finds the offset in exe, this process's executable, of the n
// bytes mapped at addr, from /proc/self/maps: the mapping that holds them
// whole and is of exe's inode.
func fileOffset(exe *os.File, addr uintptr, n int) (int64, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(exe.Fd()), &st) != nil {
		return 0, false
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		ino, err4 := strconv.ParseUint(fields[4], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		if uint64(addr) < start || uint64(addr)+uint64(n) > end {
			continue
		}
		if ino != st.Ino {
			return 0, false
		}
		return int64(off + uint64(addr) - start), true
	}
	return 0, false
}
