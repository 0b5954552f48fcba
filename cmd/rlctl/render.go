package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

const renderLong = `Render a policy repository as configuration for a consumer.

PATH is a directory of .cue policy files (not its subdirectories; files starting
with '_' or '.' are skipped) or a .cue file, default "."; several paths make one
policy. The output goes to stdout, or atomically to FILE with --out.

Targets and their output formats (-o):
  snapshot   json (the default and only format): the compiled model as a versioned
             snapshot, which the enforcer loads:
             {"schema_version": 1, "content_hash": "sha256:<hex>", "model": {...}}

Policy problems are printed to stderr, one per problem, as the message followed by
its positions (file:line:col) on indented lines, and rlctl exits 1. They include
what the enforcer would refuse to load: limits outside the engine's exact integer
range (lint's RL004). A missing path,
a directory without .cue files, an unknown target or format, or an unwritable
--out is a usage or tool error (exit 3). Exit 0 means the output was written.`

// renderFormats are the output formats of each target, the default first.
var renderFormats = map[string][]string{"snapshot": {"json"}}

// renderTargets are the values --target accepts.
var renderTargets = []string{"snapshot"}

func newRenderCmd() *cobra.Command {
	var target, output, out string
	cmd := &cobra.Command{
		Use:   "render --target TARGET [-o FORMAT] [PATH...]",
		Short: "Render policies as configuration (snapshot)",
		Long:  renderLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return usageErrorf("render: --target is required: valid targets are %s", strings.Join(renderTargets, ", "))
			}
			formats, ok := renderFormats[target]
			if !ok {
				return usageErrorf("render: unknown target %q: valid targets are %s",
					target, strings.Join(renderTargets, ", "))
			}
			if output == "" {
				output = formats[0]
			}
			if !contains(formats, output) {
				return usageErrorf("render: unknown output format %q for target %s (want %s)", output, target, strings.Join(formats, ", "))
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			m, err := schema.Load(args...)
			if err != nil {
				return loadError(cmd.ErrOrStderr(), "render", err)
			}
			// What the enforcer would refuse to load is a policy problem here too.
			if probs := lint.EngineProblems(m); len(probs) > 0 {
				return loadError(cmd.ErrOrStderr(), "render", probs)
			}
			if out != "" {
				if err := atomicfile.Write(out, func(w io.Writer) error { return policy.WriteSnapshot(w, m) }); err != nil {
					return usageErrorf("render: --out %w", err)
				}
				return nil
			}
			var buf bytes.Buffer
			if err := policy.WriteSnapshot(&buf, m); err != nil {
				return usageErrorf("render: %w", err)
			}
			if _, err := cmd.OutOrStdout().Write(buf.Bytes()); err != nil {
				return usageErrorf("render: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "what to render: "+strings.Join(renderTargets, ", "))
	f.StringVarP(&output, "output", "o", "", "output format (snapshot: json, the default)")
	f.StringVar(&out, "out", "", "write the output to `FILE` (atomically) instead of stdout")
	return cmd
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// loadError reports the error schema.Load returned: policy problems are printed as findings (exit
// 1), anything else is a tool error (exit 3).
func loadError(stderr io.Writer, cmdName string, err error) error {
	var probs schema.Problems
	if !errors.As(err, &probs) {
		return usageErrorf("%s: %w", cmdName, err)
	}
	for _, p := range probs {
		fmt.Fprintln(stderr, p.String())
	}
	return findings()
}
