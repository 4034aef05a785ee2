package testenv

import (
	"fmt"
	"strings"
)

// RawRequest is one HTTP/1.1 request as the bytes on the wire, for tests
// that send what a client library would not (a Content-Type header twice,
// a form body on any endpoint, a framing of their own): Host "docker",
// Connection: close, each of headers a whole header line, the body framed
// by Content-Length or, with chunked, as one chunk.
func RawRequest(method, target string, headers []string, body string, chunked bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n", method, target)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if !chunked {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
		return b.String()
	}
	b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	if body != "" {
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(body), body)
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// MultipartForm is a multipart/form-data body (boundary as given) with one
// field per name, value pair in kv.
func MultipartForm(boundary string, kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, kv[i], kv[i+1])
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.String()
}
