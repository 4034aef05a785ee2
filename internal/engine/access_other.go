//go:build !unix

package engine

// socketFix says how to get to use the socket at path: file ownership is
// Unix's, so it cannot be told here ("").
func socketFix(string, string) string { return "" }
