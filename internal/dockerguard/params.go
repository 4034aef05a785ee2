package dockerguard

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
)

// Where the engine reads a request's parameters. Its handlers call
// net/http's Request.ParseForm (moby's httputils.ParseForm) or FormValue,
// which read the URL query and also the body: on POST, PUT and PATCH when
// the first Content-Type header's media type, lower-cased with
// strings.ToLower ("İ" becomes "i") and taken even when the type's
// parameters do not parse, is application/x-www-form-urlencoded; and, for
// a handler that starts with FormValue (/build), when it is
// multipart/form-data. Body values come first, so a form body can also
// override the query. The guard checks parameters in the query, so it
// makes the engine read the query and nothing else:
//
//   - checkParams refuses a query that url.ParseQuery rejects (a ";"
//     separator, which engines built with Go before 1.17 split on; a broken
//     escape), a request with more than one Content-Type header, and a
//     request with a body whose Content-Type is a form (formMediaType);
//   - forwardType gives every request the engine receives exactly one
//     Content-Type chosen by the guard, never a form: none without a body,
//     application/json for a body the guard encoded, application/octet-stream
//     for a stream it passes on. Whatever any parser makes of the client's
//     header, the engine does not see it;
//   - the route checks read every value of a parameter they check (the
//     engine reads some as lists: /build's securityopt), with the same
//     url.ParseQuery the engine uses, so keys are decoded and compared
//     case-sensitively on both sides.

// Content types the guard gives the engine (forwardType).
const (
	typeJSON   = "application/json"
	typeStream = "application/octet-stream"
)

// checkParams refuses what would let the engine read parameters the guard
// does not see (see above).
func checkParams(r *http.Request) error {
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		return deny("the query of %s %s does not parse (%v): the engine could read other parameters from it", r.Method, r.URL.Path, err)
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		return deny("%s %s has %d Content-Type headers (one at most)", r.Method, r.URL.Path, len(cts))
	}
	if len(cts) == 1 && formMediaType(cts[0]) && r.Body != nil && r.Body != http.NoBody {
		return deny("%s %s: a %q body is not accepted (the engine would read parameters from it): send parameters in the query", r.Method, r.URL.Path, cts[0])
	}
	return nil
}

// formMediaType reports whether a Content-Type names a body net/http
// decodes into parameters: its media type as mime.ParseMediaType finds it
// (before any ";", lower-cased, trimmed; what net/http switches on even
// when the parameters after it are malformed) is
// application/x-www-form-urlencoded or any multipart type.
func formMediaType(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	mt := strings.TrimSpace(strings.ToLower(base))
	return mt == "application/x-www-form-urlencoded" || strings.HasPrefix(mt, "multipart/")
}

// encodedBody is a body the guard encoded itself (setBody).
type encodedBody struct{ *bytes.Reader }

func (encodedBody) Close() error { return nil }

// forwardType sets the one Content-Type the engine gets for r, whose body
// the route's check has passed or replaced.
func forwardType(r *http.Request) {
	r.Header.Del("Content-Type")
	switch r.Body.(type) {
	case nil:
	case encodedBody:
		r.Header.Set("Content-Type", typeJSON)
	default:
		if r.Body != http.NoBody {
			r.Header.Set("Content-Type", typeStream)
		}
	}
}

// badValue returns the first value of parameter key in q that ok refuses.
// Every value is checked: which one a handler reads (the first, or all of
// them as a list) is the engine's business.
func badValue(q url.Values, key string, ok func(string) bool) (string, bool) {
	for _, v := range q[key] {
		if !ok(v) {
			return v, true
		}
	}
	return "", false
}
