package dockerguard

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkList compares GET /containers/json straight to the engine
// stand-in with the same request through the guard (the guard's own cost).
func BenchmarkList(b *testing.B) {
	e := setup(b)
	raw := unixClient(e.rawSock)
	for _, c := range []struct {
		name string
		cl   *http.Client
	}{{"raw", raw}, {"guard", e.client}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				res, err := c.cl.Get("http://docker/v1.41/containers/json")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
}
