package proxynet

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestWriteFileAtomicConcurrent: writers of one path at the same time (two
// runs keeping one workspace's topology warm) all succeed, the file holds
// one writer's whole content with the mode asked for, and no temporary
// file is left.
func TestWriteFileAtomicConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "warm-until")
	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if err := writeFileAtomic(path, []byte(fmt.Sprintf("writer %d, write %d\n", w, i)), 0o600); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var w, i int
	if _, err := fmt.Sscanf(string(data), "writer %d, write %d\n", &w, &i); err != nil {
		t.Fatalf("content %q is not one writer's: %v", data, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v: want 0600", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
