package fsguard

import (
	"encoding/json"
	"errors"
	"slices"
)

// scanJSON is a Scan on the wire (a workspace keeper's answer, package
// keeper): its unexported listing of the workspace directory included, so
// that the receiver's Lacks answers as the sender's would.
type scanJSON struct {
	Git        map[string]Entry `json:"git"`
	Setuid     []string         `json:"setuid,omitempty"`
	Truncated  bool             `json:"truncated,omitempty"`
	RootFold   []string         `json:"root_fold,omitempty"`
	RootListed bool             `json:"root_listed,omitempty"`
}

// MarshalJSON encodes the Scan, every field included.
func (s Scan) MarshalJSON() ([]byte, error) {
	return json.Marshal(scanJSON{Git: s.Git, Setuid: s.Setuid, Truncated: s.Truncated, RootFold: s.rootFold, RootListed: s.rootListed})
}

// UnmarshalJSON decodes what MarshalJSON encoded. A Scan without its .git
// section, or whose listing of the workspace directory is not sorted and
// folded (Lacks would answer wrongly), is an error.
func (s *Scan) UnmarshalJSON(b []byte) error {
	var j scanJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if j.Git == nil {
		return errors.New("fsguard: scan without its .git section")
	}
	if j.RootListed {
		for i, name := range j.RootFold {
			if !isASCII(name) || name != toLowerASCII(name) || (i > 0 && j.RootFold[i-1] > name) {
				return errors.New("fsguard: scan with a listing of the workspace that is not sorted, folded ASCII")
			}
		}
	} else if len(j.RootFold) > 0 {
		return errors.New("fsguard: scan with a listing of the workspace it does not vouch for")
	}
	*s = Scan{Git: j.Git, Setuid: j.Setuid, Truncated: j.Truncated, rootFold: slices.Clip(j.RootFold), rootListed: j.RootListed}
	return nil
}

func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
