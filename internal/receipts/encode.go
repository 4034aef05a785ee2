package receipts

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// appendRecord appends r's JSON encoding, byte for byte what json.Marshal
// produces (the chain hashes the bytes, and Verify decodes them with
// encoding/json), without reflection: encoding every record with
// json.Marshal was a twentieth of the gateway's CPU time per request. Records
// whose strings need escaping, or whose time json.Marshal refuses, are left
// to json.Marshal (ok false); FuzzAppendRecord checks the two agree.
func appendRecord(b []byte, r *Record) (_ []byte, ok bool) {
	for _, s := range [...]string{r.Session, r.Client, r.Protocol, r.Method, r.Host, r.Path, r.RuleName, r.Decision, r.Reason, r.Prev} {
		if !plainJSON(s) {
			return b, false
		}
	}
	for _, s := range r.Secrets {
		if !plainJSON(s) {
			return b, false
		}
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"time":"`...)
	n0 := len(b)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	if !strictRFC3339(b[n0:]) {
		return b, false
	}
	b = append(b, '"')
	b = appendStringField(b, `,"session":"`, r.Session, true)
	b = appendStringField(b, `,"client":"`, r.Client, true)
	b = appendStringField(b, `,"protocol":"`, r.Protocol, false)
	b = appendStringField(b, `,"method":"`, r.Method, true)
	b = appendStringField(b, `,"host":"`, r.Host, true)
	if r.Port != 0 {
		b = append(b, `,"port":`...)
		b = strconv.AppendUint(b, uint64(r.Port), 10)
	}
	b = appendStringField(b, `,"path":"`, r.Path, true)
	b = append(b, `,"rule":`...)
	b = strconv.AppendInt(b, int64(r.Rule), 10)
	b = appendStringField(b, `,"rule_name":"`, r.RuleName, true)
	b = appendStringField(b, `,"decision":"`, r.Decision, false)
	b = appendStringField(b, `,"reason":"`, r.Reason, true)
	if r.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(r.Status), 10)
	}
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, r.BytesOut, 10)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, r.BytesIn, 10)
	if len(r.Secrets) > 0 {
		b = append(b, `,"secrets":[`...)
		for i, s := range r.Secrets {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, s...)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	b = appendStringField(b, `,"prev":"`, r.Prev, false)
	b = append(b, '}')
	return b, true
}

func appendStringField(b []byte, key, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	b = append(b, key...)
	b = append(b, v...)
	return append(b, '"')
}

// plainJSON reports whether s is printable ASCII that encoding/json writes
// as it is (no quote, backslash, or HTML-escaped <, > and &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// strictRFC3339 applies time.Time.MarshalJSON's checks to an RFC3339Nano
// encoding: a four-digit year and a zone offset within ±23 hours.
func strictRFC3339(b []byte) bool {
	if len(b) < len("2006-01-02T15:04:05Z") || b[4] != '-' {
		return false
	}
	if b[len(b)-1] == 'Z' {
		return true
	}
	c := b[len(b)-len("Z07:00")]
	h := b[len(b)-len("07:00"):]
	return !('0' <= c && c <= '9') && 10*(h[0]-'0')+(h[1]-'0') < 24
}

// marshalRecord is appendRecord with json.Marshal as the fallback.
func marshalRecord(b []byte, r *Record) ([]byte, error) {
	n0 := len(b)
	if out, ok := appendRecord(b, r); ok {
		return out, nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return b[:n0], err
	}
	return append(b[:n0], line...), nil
}

// hexSum is the hex form of a SHA-256 sum (one allocation).
func hexSum(sum [32]byte) string {
	var h [64]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}
