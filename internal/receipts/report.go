package receipts

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// VerifyReport is `vak receipts verify`: it verifies the log at path with
// the public key at keyPath (with allowUnsigned, a log without signatures
// is accepted, and a missing key only checks the hash chain, which note is
// told), writes one line per problem and, when the log verifies, its
// summary to w. It returns an error when the log does not verify.
func VerifyReport(w io.Writer, path, keyPath string, allowUnsigned bool, note func(string)) error {
	var rep *Report
	var err error
	pub, kerr := LoadPublicKey(keyPath)
	switch {
	case kerr == nil:
		rep, err = VerifyFileSigned(path, pub, allowUnsigned)
	case allowUnsigned:
		note(fmt.Sprintf("no public key (%v): checking the hash chain only", kerr))
		rep, err = VerifyFile(path)
	default:
		return fmt.Errorf("%w (pass --key with the gateway's %s, or --allow-unsigned to check the hash chain only)", kerr, PubKeyFile)
	}
	if rep != nil {
		for _, p := range rep.Problems {
			if p.Line == 0 {
				fmt.Fprintf(w, "%s%s: %s\n", path, p.File, p.Reason)
			} else {
				fmt.Fprintf(w, "%s%s:%d: %s\n", path, p.File, p.Line, p.Reason)
			}
		}
	}
	if err != nil {
		if errors.Is(err, ErrTampered) {
			return fmt.Errorf("%s does not verify", path)
		}
		return err
	}
	head := "no head file"
	if rep.HeadChecked {
		head = "matches its head file"
	}
	signed := "signatures not checked"
	if rep.Signed {
		signed = fmt.Sprintf("every record signed, %d checkpoint(s), key %.16s", rep.Checkpoints, KeyID(pub))
	}
	fmt.Fprintf(w, "%s: OK, %d record(s), last hash %s (%s; %s)\n", path, rep.Records, rep.Head.Hash, head, signed)
	return nil
}

// ListReport is `vak receipts ls`: it lists every log under dir (List) as
// a table on w, verifying signatures with the public key at keyPath unless
// chainOnly. It returns an error when a log does not verify.
func ListReport(w io.Writer, dir, keyPath string, chainOnly bool) error {
	var pub ed25519.PublicKey
	if !chainOnly {
		var err error
		if pub, err = LoadPublicKey(keyPath); err != nil {
			return fmt.Errorf("%w (pass --key with the gateway's %s, or --chain-only)", err, PubKeyFile)
		}
	}
	list, err := List(dir, pub)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOG\tRECORDS\tFIRST\tLAST\tVERIFIES")
	bad := 0
	for _, s := range list {
		status := "OK"
		if pub == nil {
			status = "OK (chain only)"
		}
		if s.Problem != "" {
			status, bad = "NO: "+s.Problem, bad+1
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Path, s.Records, stamp(s.First), stamp(s.Last), status)
	}
	tw.Flush()
	if bad > 0 {
		return fmt.Errorf("%d of %d receipts log(s) do not verify (details: vak receipts verify FILE)", bad, len(list))
	}
	return nil
}

// stamp is a record time in a listing ("-" for none).
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
