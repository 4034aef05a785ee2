package main

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vak/internal/testenv/testnet"
)

// maxBody is how much of a response body http prints.
const maxBody = 1 << 20

// transport is the probes' HTTP transport: proxies from the environment,
// HTTP/2 when the server offers it, certificate verification on.
func transport() *http.Transport {
	return &http.Transport{
		Proxy:              http.ProxyFromEnvironment,
		TLSClientConfig:    &tls.Config{},
		ForceAttemptHTTP2:  true,
		DisableCompression: true,
	}
}

// httpCmd: probe http [-H 'Name: value']... [--host HOST] [--sni NAME]
// [-X METHOD] [-d BODY] URL [TIMEOUT]
func httpCmd(args []string) error {
	a, err := parseArgs(args, []string{"H", "header", "host", "sni", "X", "d"}, nil)
	if err != nil {
		return err
	}
	if len(a.pos) < 1 || len(a.pos) > 2 {
		return fmt.Errorf("%w: http [flags] URL [TIMEOUT]", errUsage)
	}
	timeout, err := parseTimeout(a.pos[1:])
	if err != nil {
		return err
	}
	method := a.value("X")
	var body io.Reader
	if a.present["d"] {
		body = strings.NewReader(a.value("d"))
		if method == "" {
			method = http.MethodPost
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, a.pos[0], body)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, h := range append(a.values["H"], a.values["header"]...) {
		name, val, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("%w: header %q is not 'Name: value'", errUsage, h)
		}
		val = strings.TrimSpace(val)
		if textproto.CanonicalMIMEHeaderKey(name) == "Host" {
			req.Host = val
			continue
		}
		req.Header.Add(name, val)
	}
	if a.present["host"] {
		req.Host = a.value("host")
	}
	tr := transport()
	prefix := ""
	if a.present["sni"] {
		// The point of --sni is to present a name the certificate may not
		// cover (to test the gateway's SNI/Host binding), so verification
		// is off for this flag only, and the output says so.
		tr.TLSClientConfig = &tls.Config{ServerName: a.value("sni"), InsecureSkipVerify: true}
		prefix = fmt.Sprintf(" verify=off sni=%s", a.value("sni"))
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: timeout, Transport: tr}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s%s", err, prefix)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	fmt.Printf("OK %d%s %s\n", resp.StatusCode, prefix, strings.TrimRight(string(b), "\r\n"))
	return nil
}

// tlsCmd: probe tls URL [TIMEOUT].
func tlsCmd(url string, timeout time.Duration) error {
	if !strings.HasPrefix(url, "https://") {
		return fmt.Errorf("%w: tls needs an https:// URL, got %q", errUsage, url)
	}
	tr := transport()
	defer tr.CloseIdleConnections()
	c := &http.Client{Timeout: timeout, Transport: tr}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 || len(resp.TLS.VerifiedChains[0]) == 0 {
		return errors.New("no verified TLS chain")
	}
	chain := resp.TLS.VerifiedChains[0]
	first, _ := bufio.NewReader(io.LimitReader(resp.Body, maxBody)).ReadString('\n')
	fmt.Printf("OK %d issuer=%q subject=%q proto=%s body=%s\n", resp.StatusCode,
		chain[len(chain)-1].Subject.CommonName, chain[0].Subject.CommonName, resp.Proto,
		strings.TrimRight(first, "\r\n"))
	return nil
}

// benchCmd: probe bench [--http1] [--timeout D] URL N CONCURRENCY.
func benchCmd(args []string) error {
	a, err := parseArgs(args, []string{"timeout"}, []string{"http1"})
	if err != nil {
		return err
	}
	if len(a.pos) != 3 {
		return fmt.Errorf("%w: bench [--http1] [--timeout D] URL N CONCURRENCY", errUsage)
	}
	n, err1 := strconv.Atoi(a.pos[1])
	conc, err2 := strconv.Atoi(a.pos[2])
	if err1 != nil || err2 != nil || n < 1 || conc < 1 {
		return fmt.Errorf("%w: bench: N and CONCURRENCY must be positive integers", errUsage)
	}
	timeout := 10 * time.Second
	if a.present["timeout"] {
		if timeout, err = parseTimeout([]string{a.value("timeout")}); err != nil {
			return err
		}
	}
	res := bench(a.pos[0], n, min(conc, n), timeout, a.present["http1"])
	b, _ := json.Marshal(res)
	if res.Errors > 0 {
		fmt.Printf("FAIL %s\n", b)
		return errPrinted
	}
	fmt.Printf("OK %s\n", b)
	return nil
}

// bench runs n GETs of url on conc workers sharing one keep-alive
// transport, after one unmeasured request per worker (connection set-up).
func bench(url string, n, conc int, timeout time.Duration, http1 bool) testnet.Bench {
	tr := transport()
	tr.MaxIdleConnsPerHost = conc
	if http1 {
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // non-nil: no h2
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: timeout, Transport: tr}
	res := testnet.Bench{URL: url, N: n, Concurrency: conc}
	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
	)
	one := func() (time.Duration, error) {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		nb, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		mu.Lock()
		res.Bytes += nb
		if res.Proto == "" {
			res.Proto = resp.Proto
		}
		mu.Unlock()
		if err != nil {
			return 0, err
		}
		if resp.StatusCode >= 400 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return d, nil
	}
	run := func(workers int, count func() bool, record bool) {
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for count() {
					d, err := one()
					if !record {
						continue
					}
					mu.Lock()
					if err != nil {
						res.Errors++
						if res.FirstError == "" {
							res.FirstError = oneLine(err.Error())
						}
					} else {
						lat = append(lat, d)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	// Warm-up: one request per worker, concurrently, not measured.
	var warm atomic.Int64
	run(conc, func() bool { return warm.Add(1) <= int64(conc) && true }, false)
	mu.Lock()
	res.Bytes = 0
	mu.Unlock()
	start := time.Now()
	run(conc, func() bool { return next.Add(1) <= int64(n) }, true)
	elapsed := time.Since(start)
	res.ElapsedMS = ms(elapsed)
	if elapsed > 0 {
		res.RPS = round(float64(len(lat)) / elapsed.Seconds())
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		var sum time.Duration
		for _, d := range lat {
			sum += d
		}
		res.MinMS, res.MaxMS = ms(lat[0]), ms(lat[len(lat)-1])
		res.MeanMS = ms(sum / time.Duration(len(lat)))
		res.MedianMS = ms(percentile(lat, 0.5))
		res.P90MS = ms(percentile(lat, 0.9))
		res.P99MS = ms(percentile(lat, 0.99))
	}
	return res
}

// percentile is the nearest-rank q-quantile of sorted (non-empty) ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

// round keeps three decimals (microseconds for milliseconds).
func round(f float64) float64 { return math.Round(f*1000) / 1000 }
