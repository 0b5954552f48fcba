package main

import (
	"encoding/json"
	"fmt"
	"runtime/debug"

	"github.com/rlctl/rlctl/internal/buildinfo"
	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// readBuildInfo is debug.ReadBuildInfo; tests replace it, since a test binary (or a build with
// -buildvcs=false) records no VCS revision.
var readBuildInfo = debug.ReadBuildInfo

const versionLong = `Print rlctl's version, the Go version it was built with, the platform, and the VCS
revision when the build recorded one ("modified" when the working tree had uncommitted
changes):

  rlctl v1.2.3 (go1.26.8, linux/amd64, revision 4f9c2e1..., modified)

JSON (-o json): {"version", "go", "platform", "revision", "modified"}; revision and
modified are left out when the build did not record them.`

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long:  versionLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErrorf("version: unknown output format %q (want text or json)", output)
			}
			bi, _ := readBuildInfo()
			info := buildinfo.Of(version, bi)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.Line("rlctl"))
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}
