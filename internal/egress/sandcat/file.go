package sandcat

import (
	"io"
	"os"
)

// ConvertFile is `vak gateway import-sandcat`: it converts the settings
// file in (Convert), tells note everything not carried over exactly, and
// writes the TOML to the new file out (mode 0600: it may hold secret
// values), or to stdout when out is empty.
func ConvertFile(in, out string, stdout io.Writer, note func(string)) error {
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	res, err := Convert(in, data)
	if err != nil {
		return err
	}
	for _, n := range res.Notes {
		note(n)
	}
	if out == "" {
		_, err = stdout.Write(res.TOML)
		return err
	}
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(res.TOML); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
