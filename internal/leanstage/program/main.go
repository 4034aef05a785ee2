// Command program is vak's lean stage program (see package leanstage):
// scripts/build-vak builds it and embeds it in vak, which runs it as the
// worker of a landlock sandbox. It is not installed on its own.
package main

import (
	"context"
	"os"

	"vak/internal/leanstage/entry"
)

func main() {
	os.Exit(entry.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
