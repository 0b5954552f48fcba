package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

const renderLong = `Render a policy repository as configuration for a consumer.

PATH is a directory of .cue policy files (default ".") or one or more .cue files.
The rendered output goes to stdout, or atomically to FILE with --out.

Targets:
  snapshot   the compiled model as a versioned JSON snapshot, which the enforcer loads:
             {"schema_version": 1, "content_hash": "sha256:<hex>", "model": {...}}

Policy problems are printed to stderr, one per problem, as the message followed by
its positions (file:line:col) on indented lines, and rlctl exits 1. A missing path
or a directory without .cue files is a tool error (exit 3).`

// renderTargets are the values --target accepts.
var renderTargets = []string{"snapshot"}

func newRenderCmd() *cobra.Command {
	var target, out string
	cmd := &cobra.Command{
		Use:   "render --target TARGET [PATH...]",
		Short: "Render policies as configuration (snapshot)",
		Long:  renderLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return usageErrorf("render: --target is required: valid targets are %s", strings.Join(renderTargets, ", "))
			}
			if target != "snapshot" {
				return usageErrorf("render: unknown target %q: valid targets are %s",
					target, strings.Join(renderTargets, ", "))
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			m, err := schema.Load(args...)
			if err != nil {
				return loadError(cmd.ErrOrStderr(), "render", err)
			}
			var buf bytes.Buffer
			if err := policy.WriteSnapshot(&buf, m); err != nil {
				return usageErrorf("render: %w", err)
			}
			if out == "" {
				if _, err := cmd.OutOrStdout().Write(buf.Bytes()); err != nil {
					return usageErrorf("render: %w", err)
				}
				return nil
			}
			if err := writeFileAtomic(out, buf.Bytes()); err != nil {
				return usageErrorf("render: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "what to render: "+strings.Join(renderTargets, ", "))
	f.StringVar(&out, "out", "", "write the output to `FILE` (atomically) instead of stdout")
	return cmd
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

// writeFileAtomic writes data to name through a temporary file in the same directory, so readers
// never see a partial file.
func writeFileAtomic(name string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
