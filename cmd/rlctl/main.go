// Command rlctl is the rate-limit policy toolchain: lint, diff, simulate, render and rollout of
// CUE policies. See the README for every command, flag, output format and exit code.
package main

import "os"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
