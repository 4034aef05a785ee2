// Package mcp serves vak's sandboxed tools (bash, read_file, write_file,
// edit_file, glob, grep) as a Model Context Protocol server, built on the
// official Go SDK. Every tool call is one worker protocol request to a
// sandbox worker that the broker started (the same path as `vak run`); the
// worker is started lazily and restarted when it dies. A tool that fails is
// an MCP tool error with a message naming the refused path or rule, never a
// failed server. The tool list is computed per server from Options, so a
// tool that cannot work for a workspace is not listed at all.
package mcp
