// Command vak runs the commands of AI coding agents in a sandbox.
package main

import (
	"context"
	"os"

	"vak/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], cli.Stdio{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}))
}
