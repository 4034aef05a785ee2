package worker

import (
	"encoding/base64"
	"errors"
	"strings"
	"unicode/utf8"

	"vak/internal/fsguard"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// fsFiles adapts fsguard to the protocol's file tools.
type fsFiles struct{ root *fsguard.Root }

// OpenFiles opens the workspace for the file tools.
func OpenFiles(workspace string, mode sandbox.Mode, protected []string) (*fsFiles, error) {
	root, err := fsguard.Open(workspace, fsguard.Options{
		Writable:  mode == sandbox.WorkspaceWrite || mode == sandbox.FullAccess,
		Protected: protected,
	})
	if err != nil {
		return nil, err
	}
	return &fsFiles{root: root}, nil
}

func (f *fsFiles) Close() error { return f.root.Close() }

func (f *fsFiles) Read(a wire.ReadArgs) (*wire.ReadResult, error) {
	r, err := f.root.Read(a.Path, a.Offset, a.Limit)
	if err != nil {
		return nil, fsError(err)
	}
	out := &wire.ReadResult{Content: string(r.Content), Size: r.Size, Truncated: r.Truncated}
	if !utf8.Valid(r.Content) || jsonTextLen(r.Content) > base64.StdEncoding.EncodedLen(len(r.Content)) {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(r.Content), wire.EncodingBase64
	}
	return out, nil
}

// jsonTextLen is the length of valid UTF-8 b inside a JSON string as
// wire.Marshal writes it: control characters take six bytes (\u001b)
// or two (\n), quotes and backslashes two, U+2028 and U+2029 six. Read
// sends text whose JSON form is longer than its base64 as base64: a file
// of control characters grows sixfold as JSON text, by a third as base64.
func jsonTextLen(b []byte) int {
	n := len(b)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
			n++
		case c < 0x20:
			n += 5
		case c == 0xe2 && i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xa8 || b[i+2] == 0xa9):
			n += 3
		}
	}
	return n
}

func (f *fsFiles) Write(a wire.WriteArgs) (*wire.WriteResult, error) {
	data := []byte(a.Content)
	switch a.Encoding {
	case wire.EncodingUTF8:
	case wire.EncodingBase64:
		var err error
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return nil, wire.Errorf(wire.CodeProtocol, "content is not valid base64: %v", err)
		}
	default:
		return nil, wire.Errorf(wire.CodeProtocol, "unknown encoding %q", a.Encoding)
	}
	if err := f.root.Write(a.Path, data); err != nil {
		return nil, fsError(err)
	}
	return &wire.WriteResult{Bytes: int64(len(data))}, nil
}

func (f *fsFiles) Edit(a wire.EditArgs) (*wire.EditResult, error) {
	n, err := f.root.Edit(a.Path, a.Old, a.New, a.ReplaceAll)
	if err != nil {
		return nil, fsError(err)
	}
	return &wire.EditResult{Replacements: n}, nil
}

func (f *fsFiles) Glob(a wire.GlobArgs) (*wire.GlobResult, error) {
	r, err := f.root.Glob(a.Pattern, a.Max)
	if err != nil {
		return nil, fsError(err)
	}
	return &wire.GlobResult{Paths: nonNil(r.Paths), Truncated: r.Truncated}, nil
}

func (f *fsFiles) Grep(a wire.GrepArgs) (*wire.GrepResult, error) {
	r, err := f.root.Grep(a.Pattern, a.Path, a.Glob, a.Max)
	if err != nil {
		return nil, fsError(err)
	}
	out := &wire.GrepResult{Matches: []wire.GrepMatch{}, Truncated: r.Truncated}
	for _, m := range r.Matches {
		out.Matches = append(out.Matches, wire.GrepMatch{Path: m.Path, Line: m.Line, Text: strings.ToValidUTF8(m.Text, "\uFFFD")})
	}
	return out, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// fsCodes maps fsguard's sentinels to protocol codes.
var fsCodes = []struct {
	err  error
	code string
}{
	{fsguard.ErrOutside, wire.CodeOutside},
	{fsguard.ErrProtected, wire.CodeProtected},
	{fsguard.ErrReadOnly, wire.CodeReadOnly},
	{fsguard.ErrNotFound, wire.CodeNotFound},
	{fsguard.ErrIsDir, wire.CodeIsDir},
	{fsguard.ErrNotRegular, wire.CodeNotRegular},
	{fsguard.ErrTooLarge, wire.CodeFileTooLarge},
	{fsguard.ErrNoMatch, wire.CodeNoMatch},
	{fsguard.ErrAmbiguous, wire.CodeAmbiguous},
	{fsguard.ErrInvalidPath, wire.CodeInvalidPath},
	{fsguard.ErrSymlink, wire.CodeSymlink},
	{fsguard.ErrHardLink, wire.CodeHardLink},
	{fsguard.ErrInvalidArgument, wire.CodeInvalidRegex},
	{fsguard.ErrUnsupported, wire.CodeUnsupported},
}

func fsError(err error) error {
	for _, c := range fsCodes {
		if errors.Is(err, c.err) {
			return &wire.Error{Code: c.code, Message: err.Error()}
		}
	}
	return &wire.Error{Code: wire.CodeInternal, Message: err.Error()}
}
