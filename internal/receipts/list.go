package receipts

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Summary describes one receipts log found by List.
type Summary struct {
	Path    string
	Records uint64
	// First and Last are the times of the first and last records (zero
	// for an empty log).
	First, Last time.Time
	// Problem is empty when the log verifies, else the first problem.
	Problem string
	// Signed says the signatures were checked and every record is covered
	// by a valid one.
	Signed bool
}

// List finds every receipts log (*.jsonl) under dir, verifies each (with
// its signatures when pub is not nil: a log without them does not verify)
// and returns them sorted by path. A missing dir is an empty list.
func List(dir string, pub ed25519.PublicKey) ([]Summary, error) {
	var out []Summary
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasSuffix(p, ".jsonl") {
			return nil
		}
		out = append(out, Summarize(p, pub))
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

// Summarize verifies the receipts log p (with its signatures when pub is
// not nil) and summarises it, as List does for each log it finds.
func Summarize(p string, pub ed25519.PublicKey) Summary {
	s := Summary{Path: p}
	var rep *Report
	var err error
	if pub != nil {
		rep, err = VerifyFileSigned(p, pub, false)
	} else {
		rep, err = VerifyFile(p)
	}
	switch {
	case rep != nil && len(rep.Problems) > 0:
		s.Problem = rep.Problems[0].Reason
	case err != nil:
		s.Problem = err.Error()
	}
	if rep != nil {
		s.Records, s.Signed = rep.Records, rep.Signed && rep.OK()
	}
	s.First, s.Last = timeRange(p)
	return s
}

// timeRange reads the times of a log's first and last records.
func timeRange(path string) (first, last time.Time) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for sc.Scan() {
		var r struct {
			Time time.Time `json:"time"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		if first.IsZero() {
			first = r.Time
		}
		last = r.Time
	}
	return
}
