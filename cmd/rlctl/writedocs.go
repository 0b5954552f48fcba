package main

import (
	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/internal/docgen"
)

// newWriteDocsCmd is the hidden command behind `make docs`, as promtool's write-documentation
// is: the help text is the single source of the command pages in docs/cli.
func newWriteDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "write-docs DIR",
		Short:  "Write a markdown page per command into DIR (make docs)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return docgen.CommandPages(cmd.Root(), args[0]) // a tool error: exit 3
		},
	}
}
