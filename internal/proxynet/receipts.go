package proxynet

import (
	"path/filepath"
	"time"
)

// ReceiptsDir is where a topology's receipts are kept on the host, one log
// (with its .head) per gateway lifetime.
func ReceiptsDir(stateDir, key string) string {
	return filepath.Join(stateDir, "receipts", "proxynet-"+key)
}

// ReceiptsPrefix names one gateway lifetime's copy: its creation time
// (sortable) and the first 12 characters of its container ID.
func ReceiptsPrefix(created, id string) string {
	stamp := "unknown"
	if t, err := time.Parse(time.RFC3339Nano, created); err == nil {
		stamp = t.UTC().Format("20060102T150405.000000000Z")
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return stamp + "-" + id + "-"
}
