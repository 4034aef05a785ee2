package sigv4

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxChunk bounds one chunk of a chunk-signed payload (clients send 64 KiB
// to a few MiB): a chunk is verified whole before any of it is passed on.
const MaxChunk = 16 << 20

// ResignChunks re-signs a payload in aws-chunked encoding whose chunks are
// signed (STREAMING-AWS4-HMAC-SHA256-PAYLOAD): each chunk's signature must
// verify with from's key, chained from fromSeed (the request's signature
// as the client made it); the chunk is passed on with the signature made
// with to's key, chained from toSeed (the re-signed request's). The framing
// is kept byte for byte but for the signatures, which have the same length,
// so the request's Content-Length stays right. Reading fails before a
// chunk whose signature does not verify is returned.
func ResignChunks(body io.Reader, a *Auth, from, to Credentials, fromSeed, toSeed string) io.Reader {
	return &chunkResigner{r: bufio.NewReaderSize(body, 64<<10), a: a,
		fromKey: signingKey(from.Secret, a), toKey: signingKey(to.Secret, a), fromPrev: fromSeed, toPrev: toSeed}
}

type chunkResigner struct {
	r                *bufio.Reader
	a                *Auth
	fromKey, toKey   []byte
	fromPrev, toPrev string
	out              []byte
	done             bool
	err              error
}

func (c *chunkResigner) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.done {
			return 0, io.EOF
		}
		c.err = c.next()
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// chunkSignature is the signature of one chunk, chained from prev.
func chunkSignature(key []byte, a *Auth, prev string, data []byte) string {
	sum := sha256.Sum256(data)
	sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + a.AmzDate + "\n" + a.Scope() + "\n" + prev + "\n" + EmptySHA256 + "\n" + hex.EncodeToString(sum[:])
	return hex.EncodeToString(hmacSHA256(key, sts))
}

// next reads, verifies and re-signs one chunk into c.out.
func (c *chunkResigner) next() error {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: chunk header: %v", ErrMalformed, err)
	}
	head, ok := bytes.CutSuffix(line, []byte("\r\n"))
	size, sig, found := strings.Cut(string(head), ";chunk-signature=")
	if !ok || !found || len(sig) != 64 || !isHex(sig) || size == "" || len(size) > 16 {
		return fmt.Errorf("%w: chunk header is not SIZE;chunk-signature=SIGNATURE", ErrMalformed)
	}
	n, err := strconv.ParseInt(size, 16, 64)
	if err != nil || n < 0 || n > MaxChunk {
		return fmt.Errorf("%w: chunk size %q (at most %d bytes)", ErrMalformed, size, MaxChunk)
	}
	data := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, data); err != nil {
		return fmt.Errorf("%w: chunk data: %v", ErrMalformed, err)
	}
	if !bytes.HasSuffix(data, []byte("\r\n")) {
		return fmt.Errorf("%w: chunk data does not end with CRLF", ErrMalformed)
	}
	data = data[:n]
	if !hmac.Equal([]byte(chunkSignature(c.fromKey, c.a, c.fromPrev, data)), []byte(sig)) {
		return fmt.Errorf("%w: a chunk of the payload", ErrMismatch)
	}
	newSig := chunkSignature(c.toKey, c.a, c.toPrev, data)
	c.fromPrev, c.toPrev = sig, newSig
	c.out = append(append(append(append([]byte(size), ";chunk-signature="...), newSig...), "\r\n"...), data...)
	c.out = append(c.out, "\r\n"...)
	if n == 0 {
		c.done = true
	}
	return nil
}

// SignChunks encodes payload as a chunk-signed body (chunks of size
// bytes, then the final empty chunk) chained from seed, the signature of
// the request made with payload hash StreamingSigned: what an SDK sends.
// For tests and tools.
func SignChunks(payload []byte, size int, c Credentials, a *Auth, seed string) []byte {
	key := signingKey(c.Secret, a)
	var b bytes.Buffer
	prev := seed
	for {
		n := min(size, len(payload))
		chunk := payload[:n]
		payload = payload[n:]
		sig := chunkSignature(key, a, prev, chunk)
		fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n", n, sig)
		b.Write(chunk)
		b.WriteString("\r\n")
		prev = sig
		if n == 0 {
			return b.Bytes()
		}
	}
}
